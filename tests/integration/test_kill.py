"""SIGKILL every service in turn during a campaign, and then the nats-server, with the supervisor of
`polymorph up` bringing each back (nobody restarts anything by hand): the campaign still completes,
and DuckDB holds each candidate, benchmark and verdict exactly once."""

from __future__ import annotations

import asyncio

import nats
import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.console import client, tables
from services.console.stack import SERVICES
from services.console.supervisor import GaveUp, Supervisor
from tests.integration.conftest import wait_campaigns_settled, wait_ready

pytestmark = pytest.mark.timeout(900)


async def _supervise(supervisor: Supervisor) -> None:
    while True:
        await asyncio.to_thread(supervisor.tick)
        await asyncio.sleep(0.2)


async def _until(condition, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not back in time"
        await asyncio.sleep(0.2)


async def _sql(stack, query: str) -> list[dict]:
    reply = await client.sql(stack.nats_url, query)
    assert not reply.error, reply.error
    return tables.rows(reply)


async def _proposed(stack) -> set[str]:
    """Every candidate id in the stream: what was proposed, as durably recorded. (A core subscription
    would miss what is published while the nats-server restarts: core NATS is at most once.)"""
    nc = await nats.connect(stack.url_for("agent_pool"))  # an identity that may create a consumer
    try:
        sub = await nc.jetstream().subscribe(subjects.CANDIDATES_PROPOSED, ordered_consumer=True)
        ids: set[str] = set()
        while True:
            try:
                msg = await sub.next_msg(timeout=3)
            except nats.errors.TimeoutError:
                return ids
            ids.add(ev.Candidate.FromString(msg.data).candidate_id)
    finally:
        await nc.close()


async def test_campaign_survives_sigkill_of_each_service(stack) -> None:
    await wait_ready(stack)
    await client.start_campaign(
        stack.nats_url, ev.StartCampaignRequest(model="llama-tiny", slots=["rmsnorm", "silu_mul"], budget=12)
    )
    supervisor = Supervisor(stack, backoff_s=(0.2,))
    watching = asyncio.create_task(_supervise(supervisor))
    try:
        for service in SERVICES:
            await asyncio.sleep(4)
            stack.kill_service(service)
            await _until(lambda s=service: supervisor.restarts.get(s) == 1 and not stack.dead_services(), 30)
        await asyncio.sleep(2)
        stack.nats.process.kill()  # the server itself: same port, same store, services reconnect
        await _until(lambda: supervisor.restarts.get("nats-server") == 1 and stack.nats_alive(), 30)
        await wait_ready(stack)
        await wait_campaigns_settled(stack, timeout_s=600)
    finally:
        watching.cancel()
    proposed = await _proposed(stack)

    for table in ("candidates", "benchmarks", "verdicts"):
        rows = await _sql(stack, f"select count(*) as n, count(distinct candidate_id) as d from {table}")
        assert rows[0]["n"] == rows[0]["d"], f"{table} holds duplicates"
    stored = {r["candidate_id"] for r in await _sql(stack, "select candidate_id from candidates")}
    assert proposed and stored == proposed
    unbenchmarked = await _sql(stack, "select candidate_id from candidates c where not exists "
                                      "(select 1 from benchmarks b where b.candidate_id = c.candidate_id)")
    assert unbenchmarked == []
    campaigns = await _sql(stack, "select state from campaigns")
    assert campaigns and all(c["state"] == "completed" for c in campaigns)


def test_the_supervisor_gives_up_on_a_service_that_keeps_dying(tmp_path) -> None:
    from services.console.stack import Stack

    stack = Stack(tmp_path / "stack", services=("traffic_profiler",), port=-1)
    stack.start()
    try:
        supervisor = Supervisor(stack, max_restarts=1, backoff_s=(0.0,))
        stack.kill_service("traffic_profiler")
        assert supervisor.tick() == ["traffic_profiler"]
        stack.kill_service("traffic_profiler")
        with pytest.raises(GaveUp, match="traffic_profiler died 2 times"):
            supervisor.tick()
    finally:
        stack.stop()
