"""The live service: restarts lose nothing and duplicate nothing; malformed records; campaigns re-base."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus, Delivery
from services.traffic_profiler.config import ProfilerConfig
from services.traffic_profiler.detector import DriftDetector
from services.traffic_profiler.readers import read_trace
from services.traffic_profiler.replay import replay_trace
from services.traffic_profiler.service import TrafficProfiler
from services.traffic_profiler.synthetic import SHIFTS, decorate
from tests.helpers import wait_for
from tests.traffic_profiler.test_detector import stream


async def _start(nats_url: str, state_dir: Path, **kw) -> tuple[TrafficProfiler, Bus]:
    bus = await Bus.connect(nats_url, "traffic_profiler")
    profiler = TrafficProfiler(ProfilerConfig(state_dir=state_dir, **kw))
    await profiler.start(bus)
    return profiler, bus


async def _publish(bus: Bus, records, offset: int) -> None:
    await asyncio.gather(*(bus.publish(subjects.TRAFFIC_REQUESTS, r.to_proto(), msg_id=f"r{offset + i}")
                           for i, r in enumerate(records)))


async def test_crash_and_restart_yield_the_same_drifts_exactly_once(nats_url: str, bus: Bus, traces_dir: Path,
                                                                    tmp_path: Path) -> None:
    records = list(read_trace(traces_dir / "mooncake_synthetic_trace.jsonl"))
    offline = DriftDetector()
    expected = [d.drift_id for r in records for d in offline.observe(r)]
    seen: list[str] = []

    async def on_drift(msg: ev.DriftEvent, delivery: Delivery) -> None:
        seen.append(msg.drift_id)

    await bus.consume(subjects.TRAFFIC_DRIFT, ev.DriftEvent, on_drift, durable="test-drifts")
    half = len(records) // 2
    # no periodic snapshots: after the "crash" the profiler rebuilds from its last one and the stream
    first, first_bus = await _start(nats_url, tmp_path / "state", snapshot_every_s=1e9)
    await _publish(bus, records[:half], 0)
    await wait_for(lambda: first.detector.records == half)
    await first_bus.close()  # crash: no stop(), no final snapshot
    second, second_bus = await _start(nats_url, tmp_path / "state", snapshot_every_s=1e9)
    assert second.detector.records == half  # snapshot + records read back from the stream
    await _publish(bus, records[half:], half)
    await wait_for(lambda: second.detector.records == len(records))
    await wait_for(lambda: len(seen) >= len(expected))
    await asyncio.sleep(0.5)
    await second_bus.close()
    await second.stop()
    assert seen == expected and len(set(seen)) == len(seen)


async def test_malformed_records_are_counted_and_skipped(nats_url: str, bus: Bus, tmp_path: Path) -> None:
    profiler, profiler_bus = await _start(nats_url, tmp_path / "state")
    try:
        await bus.publish(subjects.TRAFFIC_REQUESTS, ev.RequestRecord(arrival_s=1.0, prompt_tokens=-7))
        await bus.js.publish(subjects.TRAFFIC_REQUESTS, b"\xff\xfe not protobuf")
        await bus.publish(subjects.TRAFFIC_REQUESTS, ev.RequestRecord(arrival_s=2.0, prompt_tokens=10,
                                                                      output_tokens=3))
        await wait_for(lambda: profiler.detector.records == 1)
        assert profiler.state.malformed == 1
        await asyncio.sleep(0.5)
        info = await bus.js.consumer_info("TRAFFIC", "traffic-profiler")
        assert info.num_ack_pending == 0 and info.num_redelivered == 0
    finally:
        await profiler_bus.close()
        await profiler.stop()


async def test_completed_campaign_requests_a_rebase(nats_url: str, bus: Bus, tmp_path: Path) -> None:
    profiler, profiler_bus = await _start(nats_url, tmp_path / "state")
    try:
        started = ev.Campaign(campaign_id="c1", model="llama-tiny", slots=["rope"], budget=4,
                              state=ev.CAMPAIGN_STATE_RUNNING)
        await bus.publish(subjects.CAMPAIGN_STARTED, started)
        await bus.publish(subjects.CAMPAIGN_COMPLETED,
                          ev.Campaign(campaign_id="c1", model="llama-tiny", slots=["rope"], budget=4,
                                      state=ev.CAMPAIGN_STATE_COMPLETED), msg_id="c1:COMPLETED")
        await wait_for(lambda: profiler.detector.rebase_requested)
    finally:
        await profiler_bus.close()
        await profiler.stop()


async def test_replay_counts_malformed_lines_and_keeps_going(nats_url: str, bus: Bus, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [json.dumps({"timestamp": 10 * i, "input_length": 100 + i, "output_length": 4}) for i in range(50)]
    lines[10] = "{not json"
    lines[20] = json.dumps({"timestamp": 200, "input_length": -1, "output_length": 4})
    trace.write_text("\n".join(lines) + "\n")
    seen: list[ev.RequestRecord] = []

    async def on_record(msg: ev.RequestRecord, delivery: Delivery) -> None:
        seen.append(msg)

    await bus.consume(subjects.TRAFFIC_REQUESTS, ev.RequestRecord, on_record, durable="test-records")
    stats = await replay_trace(nats_url, trace, 100.0, progress=False)  # paced: 0.49 s of trace in ~5 ms
    assert (stats.records, stats.malformed, stats.published, stats.failed) == (48, 2, 48, 0)
    assert len(stats.errors) == 2
    summary = stats.summary()  # what `polymorph replay` prints at the end
    assert "48 records, 48 published" in summary and "2 malformed lines" in summary
    assert summary.count("malformed: t.jsonl:") == 2
    await wait_for(lambda: len(seen) == 48)
    assert seen[-1].arrival_s == 0.49 and seen[0].request_id == "t:0"
    again = await replay_trace(nats_url, trace, 0, limit=5, progress=False)  # a second run is not a duplicate
    assert again.published == 5 and again.duplicates == 0


async def test_drift_events_on_the_bus_carry_per_tag_profiles(nats_url: str, bus: Bus, tmp_path: Path) -> None:
    shift = next(s for s in SHIFTS if s.name.startswith("regional"))
    records = decorate(stream(700, rate=5.0, seed=11), shift.before, shift.after, 400, seed=11)
    seen: list[ev.DriftEvent] = []

    async def on_drift(msg: ev.DriftEvent, delivery: Delivery) -> None:
        seen.append(msg)

    await bus.consume(subjects.TRAFFIC_DRIFT, ev.DriftEvent, on_drift, durable="test-tag-drifts")
    profiler, profiler_bus = await _start(nats_url, tmp_path / "state")
    try:
        await _publish(bus, records, 0)
        await wait_for(lambda: profiler.detector.records == len(records))
        await wait_for(lambda: any("tag_mix" in {c.metric for c in d.changes} for d in seen))
    finally:
        await profiler_bus.close()
        await profiler.stop()
    event = next(d for d in seen if "tag_mix" in {c.metric for c in d.changes})
    assert event.t_s >= 400
    for profile in (event.reference, event.current):
        tags = {t.tag: t for t in profile.tags}
        assert set(tags) == {"eu", "us"} and sum(t.requests for t in tags.values()) == profile.requests
        assert all(t.prompt_tokens.p50 > 0 and t.arrival_rate > 0 for t in tags.values())
    shares = {t.tag: t.share for t in event.current.tags}, {t.tag: t.share for t in event.reference.tags}
    assert shares[0]["eu"] > shares[1]["eu"]  # the mix moved towards eu
