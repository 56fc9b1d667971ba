"""Conversions between protobuf messages and the engine's typed protocol (protocol.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.shapes import Shape, ShapeError
from services.engine_host.protocol import RunReport, Status, TimingStats

if TYPE_CHECKING:  # the host process never imports torch
    from services.common.tensors import EncodedTensor

TIER_NAMES: dict[int, str] = {es.TIER_FAST: "fast", es.TIER_SLOW: "slow"}
TIER_ENUMS: dict[str, es.Tier] = {"fast": es.TIER_FAST, "slow": es.TIER_SLOW}

BENCH_STATUS: dict[Status, ev.BenchStatus] = {
    Status.OK: ev.BENCH_STATUS_OK,
    Status.LOAD_ERROR: ev.BENCH_STATUS_LOAD_ERROR,
    Status.RAISED: ev.BENCH_STATUS_RAISED,
    Status.CRASHED: ev.BENCH_STATUS_CRASHED,
    Status.TIMEOUT: ev.BENCH_STATUS_TIMEOUT,
    Status.WRONG_OUTPUT: ev.BENCH_STATUS_WRONG_OUTPUT,
}
RUN_STATUS: dict[Status, es.RunStatus] = {
    Status.OK: es.RUN_STATUS_OK,
    Status.LOAD_ERROR: es.RUN_STATUS_LOAD_ERROR,
    Status.RAISED: es.RUN_STATUS_RAISED,
    Status.CRASHED: es.RUN_STATUS_CRASHED,
    Status.TIMEOUT: es.RUN_STATUS_TIMEOUT,
    Status.WRONG_OUTPUT: es.RUN_STATUS_WRONG_OUTPUT,
}
assert set(BENCH_STATUS) == set(RUN_STATUS) == set(Status)
BACKEND_NAMES = {ev.BACKEND_TORCH: "torch", ev.BACKEND_TRITON: "triton", ev.BACKEND_COMPILE: "compile"}


def shapes(buckets: Iterable[ev.ShapeBucket]) -> tuple[Shape, ...]:
    """Buckets as Shapes; ShapeError (a bad request) for one no engine can run."""
    out = []
    for b in buckets:
        phase = {ev.PHASE_PREFILL: "prefill", ev.PHASE_DECODE: "decode"}.get(b.phase)
        if phase is None:
            raise ShapeError(f"shape bucket without a phase: {b}")
        out.append(Shape(phase, b.batch_size or 1, b.context_len or 1, b.weight if b.weight > 0 else 1.0))
    return tuple(out)


def bucket(shape: Shape) -> ev.ShapeBucket:
    return ev.ShapeBucket(phase=ev.PHASE_PREFILL if shape.phase == "prefill" else ev.PHASE_DECODE,
                          batch_size=shape.batch, context_len=shape.context, weight=shape.weight)


def tensor(encoded: EncodedTensor | None) -> es.TensorProto | None:
    if encoded is None:
        return None
    shape, dtype, data = encoded
    return es.TensorProto(shape=list(shape), dtype=dtype, data=data)


def timing(stats: TimingStats) -> ev.Timing:
    return ev.Timing(median_us=stats.median_us, p10_us=stats.p10_us, p90_us=stats.p90_us, runs=stats.runs)


def run_slot_reply(slot: str, result: RunReport) -> es.RunSlotReply:
    reply = es.RunSlotReply(slot=slot, status=RUN_STATUS[result.status], error=result.error,
                            extra_calls=result.extra_calls, extra_failure=result.extra_failure,
                            extra_stopped_by_time=result.extra_stopped_by_time)
    for run in result.runs:
        slot_run = es.SlotRun(input_id=run.input_id, inputs_mutated=run.inputs_mutated, error=run.error)
        for field in ("reference", "first", "second"):
            value = tensor(getattr(run, field))
            if value is not None:
                getattr(slot_run, field).CopyFrom(value)
        reply.runs.append(slot_run)
    return reply
