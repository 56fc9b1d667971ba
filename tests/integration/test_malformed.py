"""A flood of garbage on every subject of the real stack, published with the very identity allowed to
publish there (a buggy or compromised service): undecodable bytes, empty payloads, messages of the
wrong type, oversized fields. Every consumer terminates and logs them, none loops on them, no
campaign starts, no row is stored, no process dies, the request subjects answer each with an error;
and a campaign started afterwards still completes. Any other identity cannot publish there at all."""

from __future__ import annotations

import asyncio
import random

import nats
import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.console import client, tables
from tests.integration.conftest import wait_campaigns_settled, wait_ready
from tests.integration.flood import DURABLE_SUBJECTS, flood_durable_subjects, flood_requests

pytestmark = pytest.mark.timeout(900)

TABLES = ("candidates", "benchmarks", "verdicts", "campaigns", "drift_events", "board_notes", "events",
          "traffic_profiles", "promotions")


async def _counts(stack) -> dict[str, int]:
    counts = {}
    for table in TABLES:
        reply = await client.sql(stack.nats_url, f"select count(*) as n from {table}")
        assert not reply.error, reply.error
        counts[table] = int(tables.rows(reply)[0]["n"])
    return counts


@pytest.fixture
def stack_env() -> dict[str, str]:
    # refuse results for an unknown candidate after ~6 s instead of ~2 min
    return {"POLYMORPH_REGISTRY_CANDIDATE_DELIVERIES": "3", "POLYMORPH_VERIFIER_CANDIDATE_DELIVERIES": "3"}


async def test_a_flood_of_garbage_changes_nothing_and_the_loop_still_works(stack) -> None:
    await wait_ready(stack)
    await asyncio.sleep(3)  # every service has created its consumers
    pids = {name: proc.pid for name, proc in stack.processes.items()}
    rng = random.Random(7)
    sent = await flood_durable_subjects(stack.url_for, rng)
    operator = await nats.connect(stack.nats_url)
    answered: dict[str, list] = {}  # requests answered without an error
    for subject, payload, reply in await flood_requests(stack.nats_url, rng):
        sent += 1
        if reply is None:  # engine.discover answers only requests it can serve
            assert subject == subjects.ENGINE_DISCOVER
            continue
        if subject == subjects.ENGINE_DISCOVER:
            continue
        decoded = {subjects.CAMPAIGN_START: ev.Campaign, subjects.REGISTRY_SQL: ev.SqlReply,
                   subjects.REGISTRY_EXPORT: ev.ExportReply}[subject].FromString(reply)
        assert not getattr(decoded, "campaign_id", ""), f"{subject} started a campaign from {payload[:40]!r}"
        if not (getattr(decoded, "error", "") or getattr(decoded, "stop_reason", "")):
            answered.setdefault(subject, []).append((payload[:60], str(decoded)[:200]))
    assert sent >= 2000
    assert sum(map(len, answered.values())) <= 20, answered  # a few parse as valid queries: "select 1" runs

    js = operator.jetstream()
    consumers: list = []
    for _ in range(300):  # the consumers work through the flood
        consumers = [c for st in subjects.STREAMS for c in await js.consumers_info(st.name)]
        if not [c for c in consumers if c.num_ack_pending or c.num_pending]:
            break
        await asyncio.sleep(1)
    await operator.close()
    assert len(consumers) >= 10, [c.name for c in consumers]
    assert [c.name for c in consumers if c.num_ack_pending or c.num_pending] == []
    # a benchmark or verdict that decodes waits a few deliveries for its candidate (which may be late
    # after a restart) and is then refused; nothing else is ever retried
    waiting = {"registry-candidates-benchmarked", "registry-candidates-verified", "verifier"}
    assert [c.name for c in consumers if c.num_redelivered and c.name not in waiting] == [], "garbage retried"

    assert {name: proc.pid for name, proc in stack.processes.items()} == pids
    assert stack.dead_services() == {}
    assert await _counts(stack) == dict.fromkeys(TABLES, 0)
    logged = "".join(p.read_text(errors="replace") for p in stack.log_dir.glob("*.log"))
    assert logged.count("malformed") + logged.count("refused") >= len(DURABLE_SUBJECTS) * 3
    refused = await client.sql(stack.nats_url, "drop table candidates")
    assert "read-only" in refused.error

    campaign = await client.start_campaign(stack.nats_url, ev.StartCampaignRequest(
        model="llama-tiny", slots=["rmsnorm"], budget=6))
    assert campaign.campaign_id, campaign.stop_reason
    snap = await wait_campaigns_settled(stack, timeout_s=600)
    assert [c["state"] for c in snap.campaigns] == ["completed"]
    assert snap.totals["benchmarked"] >= 1


async def test_optimize_for_a_model_no_engine_serves_fails_at_once_with_the_reason(stack) -> None:
    await wait_ready(stack)
    refused = await client.start_campaign(stack.nats_url, ev.StartCampaignRequest(model="llama-3.1-8b"))
    assert not refused.campaign_id
    assert "no engine serves model 'llama-3.1-8b'" in refused.stop_reason
    too_big = await client.start_campaign(stack.nats_url, ev.StartCampaignRequest(model="llama-tiny", budget=10**6))
    assert not too_big.campaign_id and "outside 0.." in too_big.stop_reason
    rows = tables.rows(await client.sql(stack.nats_url, "select count(*) as n from campaigns"))
    assert rows[0]["n"] in (0, "0")
