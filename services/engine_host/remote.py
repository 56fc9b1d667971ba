"""Timing and checking calls that run in a sandbox, from the harness's side of the boundary.

`Session` owns the buffers of a benchmark's items and the harness's own reference for the op.
`RemoteRunner` (a timing.Runner) times one sandbox: for each sample the harness refreshes the inputs,
poisons the outputs, reads its own clock around the Calls round trip (timing.compare takes off the
round trip of an empty call, one amount for both sides), and reads back random output elements right
after "done". For the candidate it then checks, in the harness: nothing still poisoned at "done" (work
deferred past the answer), a random, unpredictable subset of the timed calls against the reference,
that no output changed after "done", and that no input was written. A timed call and a checked call are the same call.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from services.common.slot_specs import OPS
from services.common.tensors import compare_all, same_bits
from services.engine_host.capture import restore_caches
from services.engine_host.models.llama import Transformer
from services.engine_host.protocol import Bind, Calls, CallsDone, OutputMeta, RestoreCaches, Status
from services.engine_host.sandboxes import Sandbox
from services.engine_host.workitems import Buffers, WorkItem, is_poison

CHECKS_PER_SAMPLE = 2  # timed calls of the candidate checked against the reference, per sample
CALIBRATION_CALLS = 8  # calls timed together to estimate one call's time
SESSION_BYTES = 6 << 30  # input and output sets one benchmark holds at once (both tiers share a GPU)


class CandidateFailed(Exception):
    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def as_outputs(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def output_meta(out: Any) -> tuple[OutputMeta, ...]:
    return tuple(OutputMeta(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in as_outputs(out))


class Session:
    """The items of one benchmark or run, their shared buffers and the reference that checks them."""

    def __init__(self, items: list[WorkItem], reference: Callable[..., Any], model: Transformer | None,
                 device: torch.device, seed: int, timeout_s: float, budget_bytes: int = SESSION_BYTES) -> None:
        self.items = {it.key: it for it in items}
        self.reference, self.model, self.device, self.timeout_s = reference, model, device, timeout_s
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.rng = random.Random(seed ^ 0x5EED)  # which calls get checked: drawn after the calls ran
        self.buffers: dict[str, Buffers] = {}
        self.expect: dict[str, tuple[OutputMeta, ...]] = {}
        self.budget_bytes = budget_bytes
        self.checked = 0
        self.timed = 0

    def reference_out(self, item: WorkItem, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if item.caches and self.model is not None:
            restore_caches(self.model, item.caches)
        return as_outputs(self.reference(*args))

    def expected(self, item: WorkItem) -> tuple[OutputMeta, ...]:
        """The shapes and dtypes of the item's outputs, from one reference call (once per item)."""
        if item.key not in self.expect:
            self.expect[item.key] = output_meta(self.reference_out(item, item.bases[0]))
        return self.expect[item.key]

    def max_sets(self, item: WorkItem) -> int:
        """Input sets an item may hold: its share of the session's budget (every item's buffers stay
        allocated for the whole comparison, so 30 items of 200 sets each took 50 GB of an H100) over
        what one set costs (fresh arguments in three copies, the outputs), never below calibration's."""
        first = item.bases[0]
        fresh = sum(first[a].nbytes for a in OPS[item.op].fresh if a < len(first) and isinstance(first[a], Tensor))
        outputs = sum(math.prod(m.shape) * getattr(torch, m.dtype).itemsize for m in self.expected(item))
        share = self.budget_bytes // max(len(self.items), 1)
        return max(CALIBRATION_CALLS, len(item.bases), share // max(3 * fresh + outputs, 1))

    def bufs(self, item: WorkItem, need: int) -> Buffers:
        have = self.buffers.get(item.key)
        if have is None or have.n_sets < need:
            fresh = Buffers(item, max(need, 1), self.expected(item), self.device, self.gen)
            fresh.generation = have.generation + 1 if have is not None else 0
            self.buffers[item.key] = have = fresh
        return have

    def check(self, box: Sandbox, item: WorkItem, rows: list[int]) -> None:
        """Before any timing: the candidate on base input sets `rows` (unperturbed) against the reference."""
        bufs = self.bufs(item, len(item.bases))
        box.call(Bind(item.key, item.op, bufs.sets, bufs.outputs, bufs.expect, item.graphed), self.timeout_s)
        if item.caches:
            box.call(RestoreCaches(item.caches), self.timeout_s)
        bufs.poison(bufs.n_sets)
        done: CallsDone = box.call(Calls(item.key, tuple((i, i) for i in rows)), self.timeout_s)
        if done.error:
            raise CandidateFailed(Status.RAISED, f"raised on {item.key}: {done.error}")
        if done.contract:
            raise CandidateFailed(Status.WRONG_OUTPUT, f"on {item.key}: {done.contract}")
        for i in rows:
            result = compare_all(tuple(slab[i] for slab in bufs.outputs), self.reference_out(item, item.bases[i]))
            if not result.passed:
                raise CandidateFailed(Status.WRONG_OUTPUT, f"on {item.key}: {result.detail}")
        if not bufs.inputs_intact(rows):
            raise CandidateFailed(Status.WRONG_OUTPUT, f"on {item.key}: the kernel wrote into its inputs")

    def verify(self, item: WorkItem, bufs: Buffers, n: int, idx: torch.Tensor, gathered: list[torch.Tensor],
               every: bool = False) -> None:
        """The candidate's n timed calls, as the harness sees them now (raises CandidateFailed); `every`:
        check each call against the reference, not a random few."""
        self.timed += n
        for got in gathered:
            if bool(is_poison(got).any()):
                raise CandidateFailed(Status.WRONG_OUTPUT, f"on {item.key}: outputs were not written when the "
                                      "kernel reported done (work deferred past its answer)")
        rows = list(range(n)) if every else self.rng.sample(range(n), min(n, CHECKS_PER_SAMPLE))
        for i in rows:
            expected = self.reference_out(item, bufs.private_args(i))
            got_i = tuple(slab[i] for slab in bufs.outputs)
            result = compare_all(got_i, expected)
            if not result.passed:
                raise CandidateFailed(Status.WRONG_OUTPUT, f"timed call on {item.key}: {result.detail}")
        self.checked += len(rows)
        for slab, got in zip(bufs.outputs, gathered, strict=True):
            now = slab[:n].reshape(n, -1)[:, idx % max(slab[0].numel(), 1)]
            if not same_bits(now, got):
                raise CandidateFailed(Status.WRONG_OUTPUT, f"on {item.key}: an output changed after the kernel "
                                      "reported done")
        if not bufs.inputs_intact(rows):
            raise CandidateFailed(Status.WRONG_OUTPUT, f"on {item.key}: the kernel wrote into its inputs")

CORE_SHARE_MARGIN = 1.25  # CPU seconds per second of its calls beyond `threads` cores that fail it
CORE_SHARE_SLACK_S = 0.05  # /proc counts CPU time in clock ticks (10 ms) per process


class CoreShare:
    """The CPU a sandbox used while it was timed, against what its `threads` cores give in the time the
    harness waited on its calls. More means work on further cores (threads or processes the candidate
    started, an affinity it widened): a speedup its share of the machine does not give, or cores taken
    from the side timed while it waits."""

    def __init__(self, box: Sandbox, threads: int) -> None:
        self.box, self.threads = box, threads
        self.cpu0, self.calls0 = box.cpu_s(), box.call_s

    def check(self) -> None:
        used, waited = self.box.cpu_s() - self.cpu0, self.box.call_s - self.calls0
        allowed = self.threads * waited * CORE_SHARE_MARGIN + CORE_SHARE_SLACK_S
        if used > allowed:
            raise CandidateFailed(Status.WRONG_OUTPUT, f"used {used:.2f} s of CPU in {waited:.2f} s of calls while "
                                  f"timed ({used / max(waited, 1e-9):.1f} cores; its sandbox has {self.threads})")


class RemoteRunner:
    def __init__(self, session: Session, box: Sandbox, checked: bool, rivals: tuple[Sandbox, ...] = ()) -> None:
        self.session, self.box, self.checked, self.rivals = session, box, checked, rivals
        self.bound: dict[str, int] = {}  # item key → generation of the buffers the sandbox holds
        self.rtt: dict[str, float] = {}
        self.in_calls_s = 0.0  # seconds spent inside timed Calls round trips (the rest is the harness's work)
        self.spent: dict[str, float] = {}  # harness seconds per step of a sample (freeze, renew, switch, check)
        self.sequences: set[tuple[str, int]] = set()  # (item, calls) the sandbox has captured as a graph

    def _spend(self, step: str, since: float) -> float:
        now = time.perf_counter()
        self.spent[step] = self.spent.get(step, 0.0) + now - since
        return now

    def _frozen_then_call(self, item: WorkItem, pairs: tuple[tuple[int, int], ...],
                          prepare: Callable[[], None] = lambda: None) -> float:
        """`prepare` (fresh inputs, poisoned outputs) runs while the sandbox is stopped, and the clock
        starts before it is let go: a candidate thread that watched the buffers could otherwise
        compute the next answers before the call it is timed on (work ahead of the clock)."""
        mark = time.perf_counter()
        self.box.freeze()
        for rival in self.rivals:
            rival.settle()
        mark = self._spend("freeze", mark)
        prepare()
        self._spend("renew", mark)
        return self._call(item, pairs)

    def _call(self, item: WorkItem, pairs: tuple[tuple[int, int], ...]) -> float:
        t0 = time.perf_counter()  # Sandbox.call thaws a frozen box inside the window
        done: CallsDone = self.box.call(Calls(item.key, pairs), self.session.timeout_s)
        seconds = time.perf_counter() - t0
        if done.error:
            raise CandidateFailed(Status.RAISED, f"raised on {item.key}: {done.error}") if self.checked else \
                RuntimeError(f"the incumbent raised on {item.key}: {done.error}")
        if done.contract:
            raise CandidateFailed(Status.WRONG_OUTPUT, f"on {item.key}: {done.contract}") if self.checked else \
                RuntimeError(f"the incumbent broke the output contract on {item.key}: {done.contract}")
        return seconds

    def _ready(self, item: WorkItem, n: int) -> Buffers:
        mark = time.perf_counter()
        for rival in self.rivals:  # nothing of the other side runs while this side is timed
            rival.freeze(wait=False)  # its stop settles while this side's untimed calls run
        self._spend("freeze", mark)
        bufs = self.session.bufs(item, n)
        if self.bound.get(item.key) != bufs.generation:
            self.box.call(Bind(item.key, item.op, bufs.sets, bufs.outputs, bufs.expect, item.graphed),
                          self.session.timeout_s)
            self.bound[item.key] = bufs.generation
            self.sequences = {seq for seq in self.sequences if seq[0] != item.key}
            empty = [self._frozen_then_call(item, ()) for _ in range(7)]  # as a timed sample sees it
            self.rtt[item.key] = float(np.median(empty))
        if item.caches:
            self.box.call(RestoreCaches(item.caches), self.session.timeout_s)
        return bufs

    def _captured(self, item: WorkItem, pairs: tuple[tuple[int, int], ...]) -> None:
        """A graphed item's call sequence is captured the first time its sandbox sees it: untimed here."""
        if item.graphed and self.session.device.type == "cuda" and (item.key, len(pairs)) not in self.sequences:
            self._call(item, pairs)
            self.sequences.add((item.key, len(pairs)))

    def calibrate(self, item: Any, warmup_calls: int) -> float:
        bufs = self._ready(item, CALIBRATION_CALLS)
        self._call(item, tuple((i % bufs.n_sets, i % bufs.n_sets) for i in range(warmup_calls)))
        pairs = tuple((i, i) for i in range(CALIBRATION_CALLS))
        self._captured(item, pairs)
        seconds = self._frozen_then_call(item, pairs, lambda: bufs.renew(CALIBRATION_CALLS))
        return max(seconds - self.rtt[item.key], 1e-9) / CALIBRATION_CALLS

    def overhead_s(self, item: Any) -> float:
        return self.rtt.get(item.key, 0.0)

    def max_calls(self, item: Any) -> int:
        return self.session.max_sets(item)

    def sample(self, item: Any, calls: int, offset: int) -> float:
        bufs = self._ready(item, calls)
        pairs = tuple((i, i) for i in range(calls))
        self._captured(item, pairs)
        mark = time.perf_counter()
        self._call(item, ((offset % bufs.n_sets, offset % bufs.n_sets),))  # absorbs the switch
        self._spend("switch_call", mark)
        seconds = self._frozen_then_call(item, pairs, lambda: bufs.renew(calls))
        self.in_calls_s += seconds
        mark = time.perf_counter()
        idx, gathered = bufs.gather(calls)
        if self.checked:
            self.session.verify(item, bufs, calls, idx, gathered)
        self._spend("check", mark)
        return seconds  # the common overhead of both sides comes off in timing.compare


def is_region(op: str) -> bool:
    return OPS[op].kind == "region"
