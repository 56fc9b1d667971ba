"""Conversions between protobuf messages and the plain data engine workers exchange."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.engine_host.worker import RawShape

TIER_NAMES = {es.TIER_FAST: "fast", es.TIER_SLOW: "slow"}
TIER_ENUMS = {name: value for value, name in TIER_NAMES.items()}

BENCH_STATUS = {
    "OK": ev.BENCH_STATUS_OK,
    "LOAD_ERROR": ev.BENCH_STATUS_LOAD_ERROR,
    "RAISED": ev.BENCH_STATUS_RAISED,
    "CRASHED": ev.BENCH_STATUS_CRASHED,
    "TIMEOUT": ev.BENCH_STATUS_TIMEOUT,
    "WRONG_OUTPUT": ev.BENCH_STATUS_WRONG_OUTPUT,
}
RUN_STATUS = {
    "OK": es.RUN_STATUS_OK,
    "LOAD_ERROR": es.RUN_STATUS_LOAD_ERROR,
    "RAISED": es.RUN_STATUS_RAISED,
    "CRASHED": es.RUN_STATUS_CRASHED,
    "TIMEOUT": es.RUN_STATUS_TIMEOUT,
}
BACKEND_NAMES = {ev.BACKEND_TORCH: "torch", ev.BACKEND_TRITON: "triton", ev.BACKEND_COMPILE: "compile"}


def raw_shapes(buckets: Iterable[ev.ShapeBucket]) -> list[RawShape]:
    return [("prefill" if b.phase == ev.PHASE_PREFILL else "decode", b.batch_size, b.context_len,
             b.weight if b.weight > 0 else 1.0) for b in buckets]


def bucket(raw: RawShape | list[Any]) -> ev.ShapeBucket:
    phase, batch, context, weight = raw
    return ev.ShapeBucket(phase=ev.PHASE_PREFILL if phase == "prefill" else ev.PHASE_DECODE,
                          batch_size=batch, context_len=context, weight=weight)


def tensor(encoded: tuple[tuple[int, ...], str, bytes] | None) -> es.TensorProto | None:
    if encoded is None:
        return None
    shape, dtype, data = encoded
    return es.TensorProto(shape=list(shape), dtype=dtype, data=data)


def timing(stats: dict[str, Any]) -> ev.Timing:
    return ev.Timing(median_us=stats["median_us"], p10_us=stats["p10_us"], p90_us=stats["p90_us"],
                     runs=stats["runs"])


def run_slot_reply(slot: str, result: dict[str, Any]) -> es.RunSlotReply:
    reply = es.RunSlotReply(slot=slot, status=RUN_STATUS[result["status"]], error=result.get("error", ""))
    for run in result["runs"]:
        slot_run = es.SlotRun(input_id=run["input_id"], inputs_mutated=run.get("inputs_mutated", False),
                              error=run.get("error", ""))
        for field in ("reference", "first", "second"):
            value = tensor(run.get(field))
            if value is not None:
                getattr(slot_run, field).CopyFrom(value)
        reply.runs.append(slot_run)
    return reply
