"""Prometheus metrics on a real endpoint over HTTP, fed by the bus against a real nats-server."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import metrics, subjects
from services.common.bus import Bus, Delivery, Poison
from services.common.config import Env
from services.common.slot_specs import candidate_id
from tests.helpers import sample, scrape, wait_for


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[metrics.Endpoint]:
    served = metrics.serve(metrics.MetricsSettings("127.0.0.1", 0), "test_service", tmp_path)
    yield served
    served.stop()


def test_the_endpoint_says_where_it_is_and_forgets_it_when_stopped(tmp_path: Path) -> None:
    served = metrics.serve(metrics.MetricsSettings("127.0.0.1", 0), "registry", tmp_path)
    path = metrics.url_file(tmp_path, "registry")
    assert path.read_text().strip() == served.url
    assert served.url.startswith("http://127.0.0.1:") and served.url.endswith("/metrics")
    with urllib.request.urlopen(served.url, timeout=5) as response:
        assert response.status == 200 and b"polymorph_bus_messages_total" in response.read()
    served.stop()
    assert not path.exists()


def test_a_service_port_beats_the_shared_one_and_any_free_port_is_the_default() -> None:
    env = Env({"POLYMORPH_METRICS_PORT": "9464", "POLYMORPH_ENGINE_HOST_METRICS_PORT": "9500"})
    assert metrics.MetricsSettings.from_env(env, "engine_host") == metrics.MetricsSettings("127.0.0.1", 9500)
    assert metrics.MetricsSettings.from_env(env, "registry").port == 9464
    assert metrics.MetricsSettings.from_env(Env({}), "registry") == metrics.MetricsSettings("127.0.0.1", 0)
    assert metrics.MetricsSettings.from_env(Env({"POLYMORPH_METRICS_HOST": "0.0.0.0"}), "x").host == "0.0.0.0"


def test_a_sampled_gauge_drops_labels_that_left_the_state(endpoint: metrics.Endpoint) -> None:
    metrics.REGISTRY_BENCHMARKS.set({("ok",): 2, ("crashed",): 1})
    assert sample(scrape(endpoint.url), "polymorph_registry_benchmarks", status="crashed") == 1
    metrics.REGISTRY_BENCHMARKS.set({("ok",): 3})
    samples = scrape(endpoint.url)
    assert sample(samples, "polymorph_registry_benchmarks", status="ok") == 3
    assert not [k for k in samples if k[0] == "polymorph_registry_benchmarks" and ("status", "crashed") in k[1]]


def _cand(name: str) -> ev.Candidate:
    """A valid Candidate (invalid ones never reach a handler), told apart by `agent`."""
    source = f"# {name}\n"
    return ev.Candidate(candidate_id=candidate_id("rmsnorm", source), slot="rmsnorm", source=source, agent=name)


async def test_the_bus_counts_what_every_handler_did(bus: Bus, endpoint: metrics.Endpoint) -> None:
    seen: dict[str, int] = {}

    async def handler(msg: ev.Candidate, delivery: Delivery) -> None:
        seen[msg.agent] = delivery.num_delivered
        if msg.agent == "bad":
            raise Poison("never valid")
        if msg.agent == "flaky" and delivery.num_delivered < 2:
            raise RuntimeError("transient")

    await bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, handler, durable="metrics-t1")
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("ok"), msg_id="ok")
    assert not await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("ok"), msg_id="ok")
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("bad"))
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("flaky"))
    await bus.js.publish(subjects.CANDIDATES_PROPOSED, b"\xff\x00garbage")
    await wait_for(lambda: seen.get("flaky") == 2, timeout_s=15)

    def counted() -> dict:
        return scrape(endpoint.url)

    key = {"subject": subjects.CANDIDATES_PROPOSED, "durable": "metrics-t1"}
    await wait_for(lambda: sample(counted(), "polymorph_bus_messages_total", **key, outcome="handled") == 2)
    samples = counted()
    assert sample(samples, "polymorph_bus_messages_total", **key, outcome="poison") == 2  # "bad" and the garbage
    assert sample(samples, "polymorph_bus_messages_total", **key, outcome="retry") == 1
    assert sample(samples, "polymorph_bus_redelivered_total", **key) == 1
    assert sample(samples, "polymorph_bus_handler_seconds_count", **key) == 5
    assert ("polymorph_bus_pending", frozenset(key.items())) in samples
    assert sample(samples, "polymorph_bus_published_total", stream="CAMPAIGNS", duplicate="true") >= 1


async def test_core_requests_and_subscriptions_are_counted(bus: Bus, endpoint: metrics.Endpoint) -> None:
    async def answer(request: ev.SqlRequest) -> ev.SqlReply:
        if request.query == "boom":
            raise RuntimeError("boom")
        return ev.SqlReply()

    got: list[ev.Campaign] = []

    async def on_campaign(campaign: ev.Campaign) -> None:
        got.append(campaign)

    await bus.serve("metrics.test.sql", ev.SqlRequest, ev.SqlReply, answer)
    await bus.subscribe("metrics.test.campaigns", ev.Campaign, on_campaign)
    await bus.request("metrics.test.sql", ev.SqlRequest(query="select 1"), ev.SqlReply)
    await bus.request("metrics.test.sql", ev.SqlRequest(query="boom"), ev.SqlReply)
    await bus.nc.request("metrics.test.sql", b"\xff\x00garbage", timeout=5)
    await bus.nc.publish("metrics.test.campaigns", b"\xff\x00garbage")
    await bus.publish_core("metrics.test.campaigns", ev.Campaign(campaign_id="c", model="m", slots=["rope"], budget=1))
    await wait_for(lambda: len(got) == 1)
    await asyncio.sleep(0.2)
    samples = scrape(endpoint.url)
    for outcome in ("ok", "error", "malformed"):
        assert sample(samples, "polymorph_bus_requests_total", subject="metrics.test.sql", outcome=outcome) == 1
    core = {"subject": "metrics.test.campaigns", "durable": ""}
    assert sample(samples, "polymorph_bus_messages_total", **core, outcome="poison") == 1
    assert sample(samples, "polymorph_bus_messages_total", **core, outcome="handled") == 1
