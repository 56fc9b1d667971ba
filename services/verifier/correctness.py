"""Stages 2-3 on single slot calls: judge the engine's RunSlot replies (captured and random inputs).

The engine runs the candidate twice on each input with poisoned output buffers, and the reference on
a pristine copy; it reports what happened and we decide. Each stage becomes one CheckResult that
carries the worst error over its inputs and the first failing input.
"""

from __future__ import annotations

from collections.abc import Iterable

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.verifier.compare import Comparison, compare_protos, is_empty

_STATUS_REASON = {
    es.RUN_STATUS_LOAD_ERROR: "did not load",
    es.RUN_STATUS_RAISED: "kernel raised",
    es.RUN_STATUS_CRASHED: "the kernel's sandbox crashed running it",
    es.RUN_STATUS_TIMEOUT: "kernel hung past the engine's timeout",
    es.RUN_STATUS_WRONG_OUTPUT: "the engine's own checks failed the output",
}


class EngineProtocolError(Exception):
    """The engine answered something the contract does not allow (not the candidate's fault)."""


def status_failure(status: es.RunStatus, error: str) -> str | None:
    """None for RUN_STATUS_OK, else the reason the run failed."""
    if status == es.RUN_STATUS_OK:
        return None
    if status not in _STATUS_REASON:
        raise EngineProtocolError(f"engine returned run status {status} ({error or 'no error text'})")
    return f"{_STATUS_REASON[status]}: {error}" if error else _STATUS_REASON[status]


def failed(stage: str, detail: str) -> ev.CheckResult:
    return ev.CheckResult(stage=stage, passed=False, detail=detail)


def load_check(reply: es.RunSlotReply) -> ev.CheckResult:
    if reply.status == es.RUN_STATUS_LOAD_ERROR:
        return failed("load", status_failure(reply.status, reply.error) or "did not load")
    return ev.CheckResult(stage="load", passed=True, detail=f"loaded for slot {reply.slot or '?'}")


def check_extra_calls(stage: str, reply: es.RunSlotReply, wanted: int) -> ev.CheckResult | None:
    """The repeated calls on fresh inputs the engine checked itself: None when they all passed."""
    if reply.extra_failure:
        return failed(stage, f"after {reply.extra_calls} further calls on fresh inputs: {reply.extra_failure}")
    if reply.extra_calls < wanted and not reply.extra_stopped_by_time:
        return failed(stage, f"the engine ran {reply.extra_calls} of the {wanted} further calls asked for")
    return None


def check_outputs(stage: str, runs: Iterable[es.SlotRun], field: str = "first") -> ev.CheckResult:
    """Compare each run's `field` output ("first" or "second") with the reference."""
    runs = list(runs)
    if not runs:
        return failed(stage, "the engine returned no inputs for this stage: nothing to verify against")
    worst_abs = worst_rel = 0.0
    for run in runs:
        label = run.input_id or "?"
        if run.error:
            return failed(stage, f"{label}: {run.error}")
        if field == "first" and run.inputs_mutated:
            return failed(stage, f"{label}: the kernel wrote into its inputs")
        output = getattr(run, field)
        result: Comparison = compare_protos(output, run.reference)
        worst_abs, worst_rel = max(worst_abs, result.max_abs_err), max(worst_rel, result.rel_err)
        if not result.passed:
            prefix = "second run on the same inputs: " if field == "second" else ""
            return ev.CheckResult(stage=stage, passed=False, detail=f"{label}: {prefix}{result.detail}",
                                  max_abs_err=worst_abs, rel_err=worst_rel)
    return ev.CheckResult(
        stage=stage, passed=True, max_abs_err=worst_abs, rel_err=worst_rel,
        detail=f"{len(runs)} inputs within tolerance (max_abs_err {worst_abs:.3g}, rel_err {worst_rel:.3g})",
    )


def reference_dtype(runs: Iterable[es.SlotRun]) -> str:
    """The model's compute dtype as seen in the reference outputs (floating ones only)."""
    for run in runs:
        if not is_empty(run.reference) and run.reference.dtype.startswith(("float", "bfloat")):
            return run.reference.dtype
    return ""
