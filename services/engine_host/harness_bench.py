"""Benchmark and RunOp in the harness: work items, the quick check, the timed comparison, the runs.

Both put the candidate in a sandbox of its own, the incumbent in a fresh sandbox of its own (benchmark)
or the live engine; references are computed here, on the harness's own model, from the harness's
private copies of the inputs.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from services.common.shapes import Shape
from services.common.slot_specs import OPS
from services.common.tensors import EncodedTensor, encode
from services.engine_host import capture as cap
from services.engine_host.inputs import call_sites
from services.engine_host.ops import REGION_MODULES, check_op
from services.engine_host.procs import ChildFailure
from services.engine_host.protocol import Benchmark as BenchmarkCmd
from services.engine_host.protocol import (
    BenchmarkReport,
    Bind,
    Calls,
    CallsDone,
    InputSource,
    OpRun,
    RestoreCaches,
    RunOp,
    RunReport,
    Status,
    TimingStats,
    Unbind,
)
from services.engine_host.remote import CandidateFailed, CoreShare, RemoteRunner, Session, as_outputs
from services.engine_host.slots import REFERENCE_ID, REFERENCES
from services.engine_host.timing import compare
from services.engine_host.workitems import WorkItem

if TYPE_CHECKING:
    from services.engine_host.harness_core import Harness

REPEAT_CHUNK = 64  # extra calls per Calls round trip in RunOp


def reference_for(h: Harness, op: str) -> Any:
    if OPS[op].kind == "slot":
        return REFERENCES[op]
    module, forward = h.table.modules(op)[0], REGION_MODULES[op].forward

    def region_reference(*args: Any) -> Any:
        return forward(module, *args)

    return region_reference


def _gen(h: Harness, seed: int) -> torch.Generator:
    return torch.Generator(device=h.device).manual_seed(seed)


def _recorded(h: Harness, op: str, shapes: list[Shape], captured: bool) -> list[WorkItem]:
    """Items from real forward passes: the tier's captured store (traffic shapes), or, for a region at
    other shapes, steps recorded now."""
    keys = {s.key for s in shapes}
    if captured:
        cap.capture(h.view, h.captured, shapes, only_missing=True)
        store = h.captured
    else:
        store = cap.CaptureStore(h.spec.capture_per_slot)
        cap.capture(h.view, store, shapes)
    groups = store.grouped(op, keys)
    per_shape: dict[str, int] = {}
    for shape_key, _ in groups:
        per_shape[shape_key] = per_shape.get(shape_key, 0) + 1
    total = sum(store.weights.get(k, 1.0) for k in per_shape) or 1.0
    prefix = "captured:" if captured else ""
    return [WorkItem(f"{prefix}{shape_key}:{op}:{i}", store.weights.get(shape_key, 1.0) / total / per_shape[shape_key],
                     op=op, bases=[c.args for c in sets], caches=sets[0].caches, vocab=h.args.vocab_size,
                     graphed=shape_key.startswith("decode:"))
            for i, ((shape_key, _), sets) in enumerate(groups.items())]


def _random(h: Harness, op: str, shapes: list[Shape], seed: int) -> list[WorkItem]:
    """Items of fresh random inputs, weighted by traffic share x calls per step."""
    gen = _gen(h, seed)
    total = sum(s.weight for s in shapes)
    items = []
    for shape in shapes:
        per_set = [call_sites(op, shape, h.args, gen) for _ in range(max(h.spec.input_sets, 1))]
        for j, site in enumerate(per_set[0]):
            items.append(WorkItem(f"{shape.key}:{site.name}", shape.weight / total * site.count, op=op,
                                  bases=[sites[j].args for sites in per_set], graphed=shape.phase == "decode"))
    return items


def work_items(h: Harness, op: str, shapes: list[Shape], seed: int) -> list[WorkItem]:
    real = bool(h.spec.capture_shapes)  # the slow tier: also the inputs of real steps at these shapes
    if OPS[op].kind == "region":
        return _recorded(h, op, shapes, captured=real)
    return _random(h, op, shapes, seed) + (_recorded(h, op, shapes, captured=True) if real else [])


def _stats(s: Any) -> TimingStats:
    return TimingStats(s.median_us, s.p10_us, s.p90_us, s.runs)


def benchmark(h: Harness, cmd: BenchmarkCmd) -> BenchmarkReport:
    cand, op = cmd.candidate, cmd.candidate.op
    check_op(op)
    shapes = h.shapes(cmd.shapes, h.spec.max_shapes)
    base: dict[str, Any] = {"incumbent_id": h.installed[op].candidate_id if op in h.installed else REFERENCE_ID,
                            "shapes": tuple(s.key for s in shapes)}
    settings = h.timing if cmd.rounds <= 0 else replace(h.timing, rounds=cmd.rounds)
    seed = zlib.crc32(cand.candidate_id.encode())
    phases: dict[str, float] = {}
    began = time.perf_counter()
    try:
        box, loaded = h.candidate_box(cand, OPS[op].kind == "region", h.model.max_batch)
    except ChildFailure as failure:
        return BenchmarkReport(failure.status, f"{failure.reason}; sandbox discarded", **base)
    phases["sandbox_and_load"] = time.perf_counter() - began
    if loaded.status != Status.OK:
        h.release(box)
        return BenchmarkReport(loaded.status, loaded.error, **base)
    mark = time.perf_counter()
    items = work_items(h, op, shapes, seed)
    phases["inputs"] = time.perf_counter() - mark
    session = Session(items, reference_for(h, op), h.model, h.device, seed, h.spec.candidate_timeout_s)
    report: BenchmarkReport
    mark = time.perf_counter()
    try:
        rival = h.incumbent_box(op, OPS[op].kind == "region", h.model.max_batch)
    except Exception:
        h.release(box)
        raise
    phases["incumbent_box"] = time.perf_counter() - mark
    try:
        mark = time.perf_counter()
        for item in items:  # quick check before any timing: every captured set, one random set
            session.check(box, item, list(range(len(item.bases))) if item.key.startswith("captured:") else [0])
            h.progress(f"checked {item.key}")  # a slow first call (torch.compile) is not a hang
        phases["check_incl_jit"] = time.perf_counter() - mark
        mark = time.perf_counter()
        incumbent = RemoteRunner(session, rival, checked=False, rivals=(box,))
        candidate = RemoteRunner(session, box, checked=True, rivals=(rival,))
        h.quiet()
        share = CoreShare(box, h.spec.threads)
        result = compare(incumbent, candidate, items, settings, h.progress)
        share.check()
        phases["timing"] = time.perf_counter() - mark
        phases["timing_in_calls"] = incumbent.in_calls_s + candidate.in_calls_s
        for step in sorted({*incumbent.spent, *candidate.spent}):
            phases[f"timing_{step}"] = incumbent.spent.get(step, 0.0) + candidate.spent.get(step, 0.0)
    except CandidateFailed as failed:
        report = BenchmarkReport(failed.status, failed.reason, **base)
    except ChildFailure as failure:
        if not rival.alive:  # the incumbent's sandbox failed: not the candidate's doing
            h.release(box)  # the rival is closed below
            raise RuntimeError(f"the incumbent's sandbox failed while timing it: {failure.reason}") from failure
        report = BenchmarkReport(failure.status, f"{failure.reason}; sandbox discarded", **base)
    else:
        report = BenchmarkReport(
            Status.OK, **base, incumbent=_stats(result.incumbent), candidate=_stats(result.candidate),
            aa_spread=result.aa_spread, speedup=result.speedup, speedup_lo=result.speedup_lo,
            speedup_hi=result.speedup_hi, per_item=result.per_item, per_group=result.per_group,
            per_round=tuple(result.per_round), speedup_pooled=result.speedup_pooled,
            checked_calls=session.checked, timed_calls=session.timed, phases=phases)
    finally:
        mark = time.perf_counter()
        h.close_later(rival)  # the incumbent is trusted: nothing checks what it did last
        phases["incumbent_close"] = time.perf_counter() - mark
    mark = time.perf_counter()
    why = h.release(box)
    phases["release"] = time.perf_counter() - mark
    return BenchmarkReport(Status.WRONG_OUTPUT, why, **base) if why else report


def _encode(outs: tuple[Any, ...]) -> EncodedTensor:
    """One tensor per run: a multi-output op's outputs stacked on a new leading dim [n_outputs, ...]."""
    return encode(outs[0] if len(outs) == 1 else torch.stack(list(outs)))


def _run_sets(h: Harness, cmd: RunOp) -> list[WorkItem]:
    op, shapes = cmd.op, h.shapes(cmd.shapes) if cmd.shapes else []
    if cmd.source == InputSource.CAPTURED:
        if shapes:
            cap.capture(h.view, h.captured, shapes, only_missing=True)
        keys = {s.key for s in shapes} if shapes else None
        sets = [WorkItem(c.input_id, 1.0, op=op, bases=[c.args], caches=c.caches, vocab=h.args.vocab_size)
                for c in h.captured.sets(op, keys)]
    elif OPS[op].kind == "region":
        sets = [WorkItem(f"random:{it.key}", 1.0, op=op, bases=it.bases[:1], caches=it.caches, vocab=it.vocab)
                for it in _recorded(h, op, shapes, captured=False)]
    else:  # plain random values and stress values (outliers ~100x, tied maxima) at every shape
        gen = _gen(h, cmd.seed)
        sets = [WorkItem(f"{kind}:{shape.key}:{site.name}", 1.0, op=op, bases=[site.args])
                for shape in shapes for kind in ("random", "stress")
                for site in call_sites(op, shape, h.args, gen, stress=kind == "stress")]
    return sets[:cmd.max_inputs] if cmd.max_inputs > 0 else sets


def run_op(h: Harness, cmd: RunOp) -> RunReport:
    """Reference (here) and candidate (its sandbox) on the same inputs, twice, outputs poisoned before
    each call; then `repeats` more calls in all, spread over the sets, on fresh inputs near each set's
    values, every one checked here."""
    check_op(cmd.op)
    if cmd.source == InputSource.RANDOM and not cmd.shapes:
        raise ValueError("random inputs need shapes")
    sets = _run_sets(h, cmd)
    reference = reference_for(h, cmd.op)
    session = Session(sets, reference, h.model, h.device, cmd.seed, h.spec.candidate_timeout_s)
    if cmd.candidate is None:
        return RunReport(Status.OK, runs=tuple(OpRun(it.key, _encode(session.reference_out(it, it.bases[0])))
                                               for it in sets))
    try:
        box, loaded = h.candidate_box(cmd.candidate, OPS[cmd.op].kind == "region", h.model.max_batch)
    except ChildFailure as failure:
        return RunReport(failure.status, f"{failure.reason}; sandbox discarded")
    if loaded.status != Status.OK:
        h.release(box)
        return RunReport(loaded.status, loaded.error)
    runs: list[OpRun] = []
    status, error = Status.OK, ""
    repeats = Repeats(cmd.repeats_s)
    try:
        for it in sets:
            run = _two_calls(session, box, it, repeats)
            runs.append(run)
            if run.error and status == Status.OK:
                status, error = Status.RAISED, f"{it.key}: {run.error}"
        if status == Status.OK and cmd.repeats > 0 and sets:
            per_set = -(-cmd.repeats // len(sets))  # the total, spread over every set
            for it in sets:
                if not _repeat(session, box, it, per_set, repeats):
                    break
    except ChildFailure as failure:
        h.release(box)
        return RunReport(failure.status, f"{failure.reason}; sandbox discarded", tuple(runs))
    for it in sets:
        if box.alive:
            box.call(Unbind(it.key), h.spec.candidate_timeout_s)
    return RunReport(status, error, tuple(runs), repeats.done, repeats.failure, repeats.out_of_time)


@dataclass
class Repeats:
    """The further checked calls of a RunOp: how many ran, the first failure, the time they may take."""

    limit_s: float
    done: int = 0
    failure: str = ""
    out_of_time: bool = False
    call_s: float = 0.0  # the slowest single call seen: sizes the chunks
    began: float = field(default_factory=time.perf_counter)

    def chunk(self) -> int:
        """Calls per round trip: about half a second's worth, at most REPEAT_CHUNK."""
        return int(max(1, min(REPEAT_CHUNK, 0.5 // max(self.call_s, 1e-6))))

    def left_s(self) -> float:
        return self.limit_s - (time.perf_counter() - self.began) if self.limit_s > 0 else float("inf")


def _call_once(session: Session, box: Any, it: WorkItem, bufs: Any,
               repeats: Repeats) -> tuple[EncodedTensor | None, str]:
    if it.caches:
        box.call(RestoreCaches(it.caches), session.timeout_s)
    bufs.poison(1)
    began = time.perf_counter()
    done: CallsDone = box.call(Calls(it.key, ((0, 0),)), session.timeout_s)
    repeats.call_s = max(repeats.call_s, time.perf_counter() - began)
    if done.error or done.contract:
        return None, done.error or f"output contract: {done.contract}"
    return _encode(tuple(slab[0] for slab in bufs.outputs)), ""


def _two_calls(session: Session, box: Any, it: WorkItem, repeats: Repeats) -> OpRun:
    expected = session.reference_out(it, it.bases[0])
    bufs = session.bufs(it, 1)
    box.call(Bind(it.key, it.op, bufs.sets, bufs.outputs, bufs.expect), session.timeout_s)
    first, error = _call_once(session, box, it, bufs, repeats)
    second = None
    if not error:
        second, error = _call_once(session, box, it, bufs, repeats)
    return OpRun(it.key, _encode(as_outputs(expected)), first, second,
                 inputs_mutated=not bufs.inputs_intact([0]), error=error)


def _repeat(session: Session, box: Any, it: WorkItem, count: int, repeats: Repeats) -> bool:
    """`count` calls on fresh perturbations of the set, each checked; False once the run must stop."""
    bufs = session.bufs(it, REPEAT_CHUNK)
    box.call(Bind(it.key, it.op, bufs.sets, bufs.outputs, bufs.expect), session.timeout_s)
    left = count
    while left > 0:
        if repeats.left_s() <= 0:
            repeats.out_of_time = True
            return False
        n = min(left, repeats.chunk())
        bufs.renew(n)
        if it.caches:
            box.call(RestoreCaches(it.caches), session.timeout_s)
        done: CallsDone = box.call(Calls(it.key, tuple((i, i) for i in range(n))), session.timeout_s)
        if done.error or done.contract:
            repeats.failure = f"call {repeats.done + 1} on {it.key}: {done.error or done.contract}"
            return False
        idx, gathered = bufs.gather(n)
        try:
            session.verify(it, bufs, n, idx, gathered, every=True)
        except CandidateFailed as failed:
            repeats.failure = f"within calls {repeats.done + 1}-{repeats.done + n}: {failed.reason}"
            return False
        repeats.done += n
        left -= n
    return True
