"""Warm starts: a campaign asks the real registry what earlier campaigns won and tries that first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool import library
from services.common import subjects
from services.common.bus import Bus
from services.registry.config import RegistryConfig
from tests.agent_pool.conftest import BUCKETS, FakeEngine, result, wait_for
from tests.registry.conftest import RunningRegistry
from tests.registry.helpers import wait_sql


@pytest.fixture
async def registry(nats_url: str, tmp_path: Path) -> AsyncIterator[RunningRegistry]:
    data = tmp_path / "registry"
    config = RegistryConfig(db_path=data / "registry.duckdb", sql_timeout_s=30.0, sql_max_rows=1000,
                            sql_row_limit=100_000, sql_readers=2, export_root=data / "exports", max_deliver=100,
                            lockdown=True, threads=1, memory_limit="512MB", signing_dir=data / "keys")
    running = RunningRegistry(nats_url, config)
    await running.start()
    yield running
    await running.stop()


async def start(bus: Bus) -> ev.Campaign:
    request = ev.StartCampaignRequest(model="llama-tiny", slots=["rmsnorm"], budget=3,
                                      profile=ev.TrafficProfile(buckets=BUCKETS))
    campaign = await bus.request(subjects.CAMPAIGN_START, request, ev.Campaign)
    assert campaign.state == ev.CAMPAIGN_STATE_RUNNING, campaign.stop_reason
    return campaign


async def test_a_campaign_first_tries_what_another_pool_won_on_this_hardware(
    registry: RunningRegistry, bus: Bus, pool
) -> None:
    # what another agent pool's campaign measured: it reached this pool only through the registry (no
    # board note); one of the eager rmsnorm configurations, which a cold start picks first 1 time in 68
    won = [c for c in library.space("rmsnorm") if c.backend == "torch"][41]
    earlier = ev.Candidate(candidate_id=library.candidate_id("rmsnorm", won.source), campaign_id="elsewhere",
                           slot="rmsnorm", backend=ev.BACKEND_TORCH, source=won.source, agent="search",
                           params=won.param_dict, model="llama-tiny")
    await bus.publish(subjects.CANDIDATES_PROPOSED, earlier, msg_id=earlier.candidate_id)
    await bus.publish(subjects.CANDIDATES_BENCHMARKED, result(earlier, 1.4), msg_id=earlier.candidate_id)
    await wait_sql(bus, "SELECT count(*) FROM benchmarks WHERE campaign_id = 'elsewhere'", "1")

    await pool(agent_in_flight=1, agent_explore=0, agent_aim="false")
    engine = await FakeEngine(bus, lambda c: result(c, 0.9)).start()
    campaign = await start(bus)
    await wait_for(lambda: any(c.campaign_id == campaign.campaign_id for c in engine.candidates))
    first = next(c for c in engine.candidates if c.campaign_id == campaign.campaign_id)
    assert dict(first.params) == won.param_dict
