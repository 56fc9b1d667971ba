"""The promotion path over the real bus: candidate → benchmark → verdict → kernel.promoted, seen by a
plain nats-py subscriber and through registry.sql."""

from __future__ import annotations

import asyncio

import duckdb
import nats

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.registry import store
from services.registry.consumers import utc_now
from tests.helpers import consumer_info
from tests.registry.conftest import RunningRegistry
from tests.registry.helpers import (
    benchmark,
    candidate,
    promoted_count,
    rows,
    scalar,
    verdict,
    wait_for,
    wait_sql,
)

OWED = "SELECT count(*) FROM outbox WHERE published_at IS NULL"


async def propose_and_verify(bus: Bus, c: ev.Candidate, b: ev.BenchmarkResult, v: ev.Verdict) -> None:
    await bus.publish(subjects.CANDIDATES_PROPOSED, c, msg_id=c.candidate_id)
    await bus.publish(subjects.CANDIDATES_BENCHMARKED, b, msg_id=c.candidate_id)
    await bus.publish(subjects.CANDIDATES_VERIFIED, v, msg_id=c.candidate_id)


async def decided(bus: Bus, c: ev.Candidate, decision: str) -> None:
    await wait_sql(bus, f"SELECT decision FROM verdicts WHERE candidate_id = '{c.candidate_id}'", decision)
    await wait_sql(bus, OWED, "0")


async def test_passed_verdict_promotes_once_then_only_a_faster_kernel_replaces_it(
    registry: RunningRegistry, bus: Bus, nats_url: str
) -> None:
    plain = await nats.connect(nats_url)
    received: list[ev.KernelPromoted] = []

    async def on_promoted(msg) -> None:
        received.append(ev.KernelPromoted.FromString(msg.data))

    await plain.subscribe(subjects.KERNEL_PROMOTED, cb=on_promoted)
    first, slower, faster = candidate(1), candidate(2), candidate(3)
    try:
        await propose_and_verify(bus, first, benchmark(first, speedup_lo=1.2, vs_reference=1.3), verdict(first))
        await wait_for(lambda: _ready(len(received) == 1))
        got = received[0]
        assert (got.candidate_id, got.slot, got.model, got.hardware) == (
            first.candidate_id, "rmsnorm", "llama-tiny", "cpu-test")
        assert got.source == first.source and got.backend == ev.BACKEND_TORCH and got.replaces_id == ""
        assert got.speedup_lo == 1.2 and got.speedup_vs_reference == 1.3
        assert await rows(bus, "SELECT candidate_id, active, replaces_id FROM promotions") == [
            (first.candidate_id, "true", "")]
        assert await scalar(bus, "SELECT candidate_id FROM leaderboard WHERE active") == first.candidate_id

        # the same verdict again (a redelivery, a re-publish): nothing new is promoted or announced
        await bus.publish(subjects.CANDIDATES_VERIFIED, verdict(first), msg_id=f"{first.candidate_id}:again")
        # a slower verified candidate (beat the reference beyond noise, but not the active kernel)
        await propose_and_verify(bus, slower, benchmark(slower, speedup_lo=1.1, vs_reference=1.2), verdict(slower))
        await decided(bus, slower, "rejected")
        assert "does not beat" in await scalar(
            bus, f"SELECT decision_reason FROM verdicts WHERE candidate_id = '{slower.candidate_id}'")
        assert await promoted_count(bus) == 1

        # a faster one replaces the first
        await propose_and_verify(bus, faster, benchmark(faster, speedup_lo=1.15, vs_reference=1.6), verdict(faster))
        await decided(bus, faster, "promoted")
        await wait_for(lambda: _ready(len(received) == 2))
        assert received[1].candidate_id == faster.candidate_id
        assert received[1].replaces_id == first.candidate_id
        assert await rows(bus, "SELECT candidate_id, active, replaces_id, replaced_by FROM promotions "
                               "ORDER BY promoted_at") == [
            (first.candidate_id, "false", "", faster.candidate_id),
            (faster.candidate_id, "true", first.candidate_id, None)]
        assert await promoted_count(bus) == 2
        assert await rows(bus, "SELECT candidates, verified, passed, promoted, best_speedup FROM slot_summary") == [
            ("3", "3", "3", "2", "1.25")]
        await wait_sql(bus, "SELECT count(*) FROM events WHERE subject = 'kernel.promoted'", "2")
    finally:
        await plain.close()


async def test_failed_recheck_demotes_the_active_kernel(registry: RunningRegistry, bus: Bus) -> None:
    c = candidate(1)
    await propose_and_verify(bus, c, benchmark(c, speedup_lo=1.2, vs_reference=1.3), verdict(c))
    await decided(bus, c, "promoted")
    demoted: list[ev.KernelDemoted] = []

    async def on_demoted(msg: ev.KernelDemoted) -> None:
        demoted.append(msg)

    await bus.subscribe(subjects.KERNEL_DEMOTED, ev.KernelDemoted, on_demoted)
    recheck = verdict(c, passed=False, stage="end_to_end")
    await bus.publish(subjects.CANDIDATES_VERIFIED, recheck, msg_id=f"{c.candidate_id}:recheck")
    await decided(bus, c, "demoted")
    await wait_for(lambda: _ready(len(demoted) == 1))
    assert demoted[0].candidate_id == c.candidate_id and "end_to_end" in demoted[0].reason
    assert await rows(bus, "SELECT active, demote_reason IS NOT NULL FROM promotions") == [("false", "true")]
    assert await scalar(bus, "SELECT status FROM verdicts") == "failed"
    # a late copy of the old pass changes nothing: a failure is final
    await bus.publish(subjects.CANDIDATES_VERIFIED, verdict(c), msg_id=f"{c.candidate_id}:late")
    await wait_sql(bus, "SELECT count(*) FROM events WHERE subject = 'kernel.demoted'", "1")
    await asyncio.sleep(0.5)
    assert await rows(bus, "SELECT status, decision FROM verdicts") == [("failed", "demoted")]
    assert await promoted_count(bus) == 1


async def test_verdict_before_its_benchmark_waits_and_promotes_once(registry: RunningRegistry, bus: Bus) -> None:
    c = candidate(7)
    await bus.publish(subjects.CANDIDATES_VERIFIED, verdict(c), msg_id=c.candidate_id)
    await wait_for(lambda: _consumer_retried(bus, "registry-candidates-verified"))
    assert await scalar(bus, "SELECT count(*) FROM verdicts") == "0"  # nak'd: nothing half-stored
    await bus.publish(subjects.CANDIDATES_PROPOSED, c, msg_id=c.candidate_id)
    await bus.publish(subjects.CANDIDATES_BENCHMARKED, benchmark(c, speedup_lo=1.3, vs_reference=1.4),
                      msg_id=c.candidate_id)
    await decided(bus, c, "promoted")
    assert await promoted_count(bus) == 1


async def _ready(value: bool) -> bool:
    return value


async def _consumer_retried(bus: Bus, durable: str) -> bool:
    info = await consumer_info(bus, durable)
    return info.num_redelivered > 0 or ((info.delivered.consumer_seq or 0) > 0 and info.num_ack_pending > 0)


async def test_decision_committed_but_not_announced_before_a_crash_is_published_on_start(
    registry: RunningRegistry, bus: Bus
) -> None:
    await registry.stop()
    # What a SIGKILL between the commit and the publish leaves behind: the writer's transaction
    # committed (promotion + outbox row) and nothing on the bus.
    c = candidate(9)
    meta = store.Meta(subject=subjects.CANDIDATES_VERIFIED, stream_seq=0, received_at=utc_now())
    with duckdb.connect(str(registry.config.db_path)) as con:
        for writer, message in ((store.store_candidate, c),
                                (store.store_benchmark, benchmark(c, speedup_lo=1.2, vs_reference=1.3)),
                                (store.store_verdict, verdict(c))):
            con.execute("BEGIN TRANSACTION")
            writer(con, message, meta)
            con.execute("COMMIT")
        assert con.execute(OWED).fetchone()[0] == 1
    assert await promoted_count(bus) == 0
    await registry.start()
    await wait_for(lambda: _promoted_is(bus, 1))
    assert await scalar(bus, OWED) == "0"


async def _promoted_is(bus: Bus, n: int) -> bool:
    return await promoted_count(bus) == n
