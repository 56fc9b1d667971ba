"""The loop contract over a real nats-server: replay a real trace, the service publishes drifts."""

from __future__ import annotations

from pathlib import Path

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus, Delivery
from services.traffic_profiler.config import ProfilerConfig
from services.traffic_profiler.replay import replay_trace
from services.traffic_profiler.service import TrafficProfiler
from tests.helpers import wait_for


async def test_replay_mooncake_fires_drift_with_buckets(nats_url: str, bus: Bus, traces_dir: Path,
                                                        tmp_path: Path) -> None:
    drifts: list[ev.DriftEvent] = []

    async def on_drift(msg: ev.DriftEvent, delivery: Delivery) -> None:
        drifts.append(msg)

    await bus.consume(subjects.TRAFFIC_DRIFT, ev.DriftEvent, on_drift, durable="test-drift")
    profiler_bus = await Bus.connect(nats_url, "traffic_profiler")
    profiler = TrafficProfiler(ProfilerConfig(state_dir=tmp_path / "state"))
    await profiler.start(profiler_bus)
    try:
        stats = await replay_trace(nats_url, traces_dir / "mooncake_synthetic_trace.jsonl", 0, progress=False)
        assert stats.published == stats.records == 3993 and stats.malformed == 0
        await wait_for(lambda: profiler.detector.records == 3993)
        await wait_for(lambda: len(drifts) >= 1)
    finally:
        await profiler_bus.close()
        await profiler.stop()
    event = drifts[0]
    assert event.drift_id and event.changes
    buckets = event.current.buckets
    assert {b.phase for b in buckets} == {ev.PHASE_PREFILL, ev.PHASE_DECODE}
    assert abs(sum(b.weight for b in buckets) - 1.0) < 1e-6
    assert all(b.batch_size >= 1 and b.context_len >= 16 for b in buckets)
    assert event.reference.requests > 0 and event.current.requests > 0
