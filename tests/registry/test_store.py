"""Every event the registry consumes is stored once, however often it arrives; bad payloads are
terminated without touching what is stored; a restart keeps everything."""

from __future__ import annotations

import asyncio

import structlog

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.registry.migrations import MIGRATIONS
from tests.helpers import consumer_info, consumers
from tests.registry.conftest import RunningRegistry
from tests.registry.helpers import benchmark, candidate, rows, scalar, verdict, wait_sql

COUNTS = (
    "SELECT (SELECT count(*) FROM events) || ',' || (SELECT count(*) FROM drift_events) || ',' || "
    "(SELECT count(*) FROM traffic_profiles) || ',' || (SELECT count(*) FROM campaigns) || ',' || "
    "(SELECT count(*) FROM candidates) || ',' || (SELECT count(*) FROM benchmarks) || ',' || "
    "(SELECT count(*) FROM verdicts) || ',' || (SELECT count(*) FROM board_notes) || ',' || "
    "(SELECT count(*) FROM promotions) || ',' || (SELECT count(*) FROM models) || ',' || "
    "(SELECT count(*) FROM hardware)"
)
# events: drift, 2 campaign, 2 candidates, 2 benchmarks, 1 verdict, 1 note = 9
EXPECTED = "9,1,2,1,2,2,1,1,0,1,1"


def profile(pid: str, p50: float) -> ev.TrafficProfile:
    return ev.TrafficProfile(
        profile_id=pid, requests=500, model="llama-tiny", prompt_tokens=ev.Quantiles(p50=p50, p90=2 * p50),
        buckets=[ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=8, context_len=int(4 * p50), weight=1.0)],
    )


def loop_messages() -> list[tuple[str, object, str]]:
    """(subject, message, msg_id) for one of every event type; the verdict fails so nothing is promoted."""
    c1, c2 = candidate(1), candidate(2)
    drift = ev.DriftEvent(
        drift_id="d1", t_s=120.0, reference=profile("p-ref", 200), current=profile("p-cur", 3000),
        changes=[ev.MetricChange(metric="prompt_tokens", before=200, after=3000, ks=0.8, psi=2.1)],
    )
    started = ev.Campaign(campaign_id="c1", model="llama-tiny", slots=["rmsnorm"], trigger="d1", budget=10,
                          state=ev.CAMPAIGN_STATE_RUNNING, profile=profile("p-cur", 3000), started_unix=1.0)
    completed = ev.Campaign()
    completed.CopyFrom(started)
    completed.state, completed.finished_unix, completed.proposed = ev.CAMPAIGN_STATE_COMPLETED, 9.0, 2
    completed.stop_reason = "budget"
    note = ev.BoardNote(note_id="n1", campaign_id="c1", agent="search", slot="rmsnorm", text="fp32 acc helps",
                        params={"acc": "fp32"}, score=1.2)
    return [
        (subjects.TRAFFIC_DRIFT, drift, "d1"),
        (subjects.CAMPAIGN_STARTED, started, "c1:running"),
        (subjects.CANDIDATES_PROPOSED, c1, c1.candidate_id),
        (subjects.CANDIDATES_PROPOSED, c2, c2.candidate_id),
        (subjects.CANDIDATES_BENCHMARKED, benchmark(c1, speedup_lo=1.2, vs_reference=1.3), c1.candidate_id),
        (subjects.CANDIDATES_BENCHMARKED,
         benchmark(c2, speedup_lo=0.0, vs_reference=0.0, status=ev.BENCH_STATUS_CRASHED), c2.candidate_id),
        (subjects.CANDIDATES_VERIFIED, verdict(c1, passed=False, stage="captured"), c1.candidate_id),
        (subjects.board("c1"), note, "n1"),
        (subjects.CAMPAIGN_COMPLETED, completed, "c1:completed"),
    ]


async def publish_all(bus: Bus, messages, suffix: str = "") -> None:
    for subject, message, msg_id in messages:
        await bus.publish(subject, message, msg_id=msg_id + suffix)


async def test_every_event_type_is_stored_and_duplicates_collapse(registry: RunningRegistry, bus: Bus) -> None:
    messages = loop_messages()
    await publish_all(bus, messages)
    await wait_sql(bus, COUNTS, EXPECTED)

    assert await rows(bus, "SELECT state, proposed, stop_reason, budget, profile_id FROM campaigns") == [
        ("completed", "2", "budget", "10", "p-cur")]
    assert await rows(bus, "SELECT drift_id, metrics, current_profile_id FROM drift_events") == [
        ("d1", '["prompt_tokens"]', "p-cur")]
    assert await rows(bus, "SELECT status, reason FROM benchmarks ORDER BY status") == [
        ("crashed", ""), ("ok", "")]
    assert await rows(bus, "SELECT status, failed_stage, decision FROM verdicts") == [
        ("failed", "captured", "rejected")]
    c1 = candidate(1)
    assert await rows(bus, f"SELECT backend, agent, params->>'variant', source FROM candidates "
                           f"WHERE candidate_id = '{c1.candidate_id}'") == [("torch", "search", "1", c1.source)]
    assert await scalar(bus, "SELECT payload->>'stop_reason' FROM events WHERE subject = 'campaigns.completed'") \
        == "budget"
    stored = await rows(bus, "SELECT subject, stream FROM events")
    assert len(stored) == 9 and all(stream == subjects.stream_for(subject) for subject, stream in stored)
    assert await rows(bus, "SELECT campaign_id, slot, candidates, benchmarked, ok, wins, verified, passed, "
                           "promoted FROM campaign_progress") == [("c1", "rmsnorm", "2", "2", "1", "1", "1", "0", "0")]

    # the same messages again under fresh msg ids (JetStream delivers them all), completed before started
    await publish_all(bus, reversed(messages), suffix=":again")
    sentinel = ev.BoardNote(note_id="n-last", campaign_id="c1", text="processed after the duplicates")
    await bus.publish(subjects.board("c1"), sentinel, msg_id="n-last")
    await wait_sql(bus, "SELECT count(*) FROM board_notes", "2")
    await wait_sql(bus, "SELECT count(*) FROM events WHERE subject LIKE 'candidates.%'", "5")
    assert await scalar(bus, COUNTS) == "10,1,2,1,2,2,1,2,0,1,1"
    assert await scalar(bus, "SELECT state FROM campaigns") == "completed"  # never goes backwards


async def test_malformed_payloads_are_terminated_and_logged(registry: RunningRegistry, bus: Bus) -> None:
    await publish_all(bus, loop_messages())
    await wait_sql(bus, COUNTS, EXPECTED)

    bad: list[tuple[str, bytes]] = []
    for subject in (subjects.TRAFFIC_DRIFT, subjects.CAMPAIGN_STARTED, subjects.CAMPAIGN_COMPLETED,
                    subjects.CANDIDATES_PROPOSED, subjects.CANDIDATES_BENCHMARKED, subjects.CANDIDATES_VERIFIED,
                    subjects.board("c1"), subjects.KERNEL_PROMOTED, subjects.KERNEL_DEMOTED):
        bad.append((subject, b"\xff\x00not protobuf"))  # does not decode
        bad.append((subject, b""))  # decodes to an empty message: nothing to key it by
    # decodes, but keyless / statusless
    bad.append((subjects.CANDIDATES_VERIFIED, ev.Verdict(status=ev.VERDICT_STATUS_PASSED).SerializeToString()))
    bad.append((subjects.CANDIDATES_BENCHMARKED, ev.BenchmarkResult(candidate_id="x").SerializeToString()))
    with structlog.testing.capture_logs() as logs:
        for subject, data in bad:
            await bus.js.publish(subject, data)
        good = ev.BoardNote(note_id="n-after", campaign_id="c1", text="still working")
        await bus.publish(subjects.board("c1"), good, msg_id="n-after")
        await wait_sql(bus, "SELECT count(*) FROM board_notes", "2")
        await asyncio.sleep(0.5)  # let every consumer settle before reading their state
    terminated = [e for e in logs if e["event"] == "message terminated"]
    assert len(terminated) == len(bad)
    assert {e["subject"] for e in terminated} == {s for s, _ in bad}
    for durable in ("drift", "campaigns", "candidates-proposed", "candidates-benchmarked", "candidates-verified",
                    "board", "kernel-promoted", "kernel-demoted"):
        info = await consumer_info(bus, f"registry-{durable}")
        assert (info.num_redelivered, info.num_ack_pending, info.num_pending) == (0, 0, 0), durable
    assert await scalar(bus, COUNTS) == "10,1,2,1,2,2,1,2,0,1,1"  # only the good note was added


async def test_restart_and_full_replay_keep_exactly_one_row_each(
    registry: RunningRegistry, bus: Bus
) -> None:
    await publish_all(bus, loop_messages())
    await wait_sql(bus, COUNTS, EXPECTED)
    await registry.stop()
    await publish_all(bus, [(subjects.board("c1"), ev.BoardNote(note_id="n2", campaign_id="c1", text="second"), "n2")])

    await registry.start()  # resumes its durable consumers: only the new note is delivered
    await wait_sql(bus, "SELECT count(*) FROM board_notes", "2")
    assert await scalar(bus, COUNTS) == "10,1,2,1,2,2,1,2,0,1,1"

    # Forget every consumer position: the next start redelivers the whole stream from the beginning.
    await registry.stop()
    for stream, info in await consumers(bus):
        if info.name.startswith("registry-"):
            await bus.js.delete_consumer(stream, info.name)
    await registry.start()
    await wait_for_consumers_done(bus)
    assert await scalar(bus, COUNTS) == "10,1,2,1,2,2,1,2,0,1,1"
    assert await scalar(bus, "SELECT max(version) FROM schema_version") == str(MIGRATIONS[-1].version)


async def wait_for_consumers_done(bus: Bus, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        infos = [i for _, i in await consumers(bus) if i.name.startswith("registry-")]
        if len(infos) == 8 and all(i.num_pending == 0 and i.num_ack_pending == 0 for i in infos):
            return
        assert asyncio.get_running_loop().time() < deadline, "registry consumers did not catch up"
        await asyncio.sleep(0.1)
