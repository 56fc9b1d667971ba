"""Every service of the real stack serves Prometheus /metrics, and after real traffic the counters moved:
garbage on candidates.proposed is counted as poison by each of its consumers, a campaign's candidates are
counted proposed, benchmarked and stored, request records observed, forged promotions refused. The
embedded nats-server's HTTP monitoring answers on loopback."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import nats
import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.slot_specs import candidate_id
from services.console import client
from services.console.stack import SERVICES, Stack
from tests.helpers import sample, scrape
from tests.integration.conftest import wait_ready

pytestmark = pytest.mark.timeout(600)

GARBAGE = b"\xff\xfe not a protobuf \x00\x01"
RECORDS = 40


async def _endpoints(stack: Stack, timeout_s: float = 120) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while set(SERVICES) - set(stack.endpoints()):
        assert time.monotonic() < deadline, f"no /metrics yet from {set(SERVICES) - set(stack.endpoints())}"
        await asyncio.sleep(0.5)
    return stack.endpoints()


async def _publish(stack: Stack, identity: str, subject: str, payloads: list[bytes]) -> None:
    nc = await nats.connect(stack.url_for(identity))
    for payload in payloads:
        await nc.jetstream().publish(subject, payload)
    await nc.close()


async def test_every_service_counts_real_traffic_on_its_metrics_endpoint(stack: Stack) -> None:
    await wait_ready(stack)
    urls = await _endpoints(stack)
    with urllib.request.urlopen(f"{urls['nats-server']}/varz", timeout=5) as response:
        assert json.loads(response.read())["http_host"] == "127.0.0.1"

    await _publish(stack, "agent_pool", subjects.CANDIDATES_PROPOSED, [GARBAGE])
    records = [ev.RequestRecord(arrival_s=float(i), prompt_tokens=100 + i, output_tokens=20).SerializeToString()
               for i in range(RECORDS)]
    await _publish(stack, "traffic", subjects.TRAFFIC_REQUESTS,
                   [*records, ev.RequestRecord(arrival_s=99.0, prompt_tokens=-5).SerializeToString()])
    src = "SLOT = 'rope'\nBACKEND = 'torch'\n\ndef kernel(*args):\n    raise RuntimeError('unsigned')\n"
    unsigned = ev.KernelPromoted(candidate_id=candidate_id("rope", src), slot="rope", model="llama-tiny", source=src)
    await _publish(stack, "registry", subjects.KERNEL_PROMOTED, [unsigned.SerializeToString()])
    campaign = await client.start_campaign(stack.nats_url, ev.StartCampaignRequest(
        model="llama-tiny", slots=["rmsnorm"], budget=2))
    assert campaign.campaign_id

    garbage = {"subject": subjects.CANDIDATES_PROPOSED, "outcome": "poison"}
    expected = {  # service → (metric, labels, at least)
        "agent_pool": [("polymorph_candidates_proposed_total", {"slot": "rmsnorm"}, 1),
                       ("polymorph_campaigns", {}, 1)],
        "engine_host": [("polymorph_bus_messages_total", {**garbage, "durable": "engine-fast"}, 1),
                        ("polymorph_engine_benchmarks_total", {"tier": "fast"}, 1),
                        ("polymorph_kernel_events_refused_total", {"subject": subjects.KERNEL_PROMOTED}, 1)],
        "verifier": [("polymorph_bus_messages_total", {**garbage, "durable": "verifier-candidates"}, 1),
                     ("polymorph_bus_messages_total", {"subject": subjects.CANDIDATES_PROPOSED,
                                                       "durable": "verifier-candidates", "outcome": "handled"}, 1)],
        "registry": [("polymorph_bus_messages_total", {**garbage, "durable": "registry-candidates-proposed"}, 1),
                     ("polymorph_kernel_events_refused_total", {"subject": subjects.KERNEL_PROMOTED}, 1),
                     ("polymorph_registry_rows", {"table": "candidates"}, 1),
                     ("polymorph_registry_benchmarks", {}, 1),
                     ("polymorph_bus_requests_total", {"subject": subjects.REGISTRY_SQL, "outcome": "ok"}, 1)],
        "traffic_profiler": [("polymorph_traffic_requests_total", {}, RECORDS),
                             ("polymorph_traffic_malformed_total", {}, 1)],
    }
    deadline = time.monotonic() + 400
    missing: list[str] = ["not scraped yet"]
    while missing:
        assert time.monotonic() < deadline, f"counters that did not move: {missing}"
        await asyncio.sleep(2)
        missing = []
        for service, wanted in expected.items():
            samples = scrape(urls[service])
            missing += [f"{service}: {name}{labels} < {least}" for name, labels, least in wanted
                        if sample(samples, name, **labels) < least]
    stored = scrape(urls["registry"])
    assert sample(stored, "polymorph_registry_rows", table="candidates") >= 1
    assert sample(stored, "polymorph_registry_rows", table="events") >= sample(stored, "polymorph_registry_rows",
                                                                             table="candidates")
