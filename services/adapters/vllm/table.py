"""The op table of one vLLM worker: which implementation each served slot calls, how often each was
called, and a few of the worker's own inputs per slot (what a new kernel is checked on).

vLLM's own op is every slot's default ("native"), so with nothing promoted vLLM runs exactly as it does
without the plugin. Calls arrive in Polymorph's slot form (services/common/slot_specs.py): the op
classes in ops.py translate vLLM's arguments. Swaps replace one dict entry (atomic under the GIL), so
a forward pass running on another thread sees the old or the new kernel, never half of one.
No vLLM import here: the table, the check and the sidecar are tested without vLLM.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from services.common.tensors import Comparison, compare_all

NATIVE = "native"
SERVED_SLOTS = ("rmsnorm", "add_rmsnorm", "silu_mul", "rope")
KEEP_INPUTS = 4  # recorded input sets per slot, one per distinct argument shape, the first seen
# calls per slot that may build the slot form to record inputs; after them (or once KEEP_INPUTS shapes are
# held) a slot with nothing installed runs vLLM's op directly: the plugin's cost is one counter then
SAMPLE_CALLS = 512

Kernel = Callable[..., Any]


@dataclass(frozen=True)
class Installed:
    candidate_id: str
    kernel: Kernel | None  # None: vLLM's own op


@dataclass
class Recorded:
    args: tuple[Any, ...]  # cloned slot-form arguments
    native: Kernel  # vLLM's op for the module that made the call, in slot form


@dataclass
class TableEvent:
    unix: float
    slot: str
    action: str  # installed, refused, restored
    candidate_id: str
    detail: str = ""


def _clone(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((tuple(a.shape), str(a.dtype)) if isinstance(a, torch.Tensor) else a for a in args)


def _outputs(value: Any) -> tuple[torch.Tensor, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@dataclass
class ServingTable:
    keep_inputs: int = KEEP_INPUTS
    sample_calls: int = SAMPLE_CALLS
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)  # (slot, candidate id) → calls
    first_call: dict[tuple[str, str], float] = field(default_factory=dict)  # (slot, candidate id) → unix
    events: list[TableEvent] = field(default_factory=list)
    methods: dict[str, str] = field(default_factory=dict)  # op class → the vLLM forward it dispatches to

    def __post_init__(self) -> None:
        self._installed = {slot: Installed(NATIVE, None) for slot in SERVED_SLOTS}
        self._recorded: dict[str, dict[tuple[Any, ...], Recorded]] = {slot: {} for slot in SERVED_SLOTS}
        self._sampled = {slot: 0 for slot in SERVED_SLOTS}  # slot-form calls that could have recorded
        self._lock = threading.Lock()  # recording and events; the call path reads one dict entry

    # -- the forward path -----------------------------------------------------------------------
    def call(self, slot: str, native: Kernel, *args: Any) -> Any:
        """Run the slot's installed kernel (vLLM's own when none) on slot-form arguments."""
        current = self._installed[slot]
        key = (slot, current.candidate_id)
        self.calls[key] += 1
        if key not in self.first_call:  # when a promotion was first served (benchmarks/vllm_cpu.py)
            self.first_call[key] = time.time()
        if len(self._recorded[slot]) < self.keep_inputs and not torch.compiler.is_compiling():
            self._sampled[slot] += 1
            self._record(slot, args, native)
        if current.kernel is None:
            return native(*args)
        return current.kernel(*args)

    def serves_native(self, slot: str, n: int = 1) -> bool:
        """True (and the n calls counted as vLLM's) when the caller may run vLLM's own op directly,
        without building the slot form: nothing is installed and the slot's inputs are sampled."""
        if self._installed[slot].kernel is not None or (
                len(self._recorded[slot]) < self.keep_inputs and self._sampled[slot] < self.sample_calls):
            return False
        key = (slot, NATIVE)
        self.calls[key] += n
        if key not in self.first_call:
            self.first_call[key] = time.time()
        return True

    def _record(self, slot: str, args: tuple[Any, ...], native: Kernel) -> None:
        key = _signature(args)
        with self._lock:
            if key not in self._recorded[slot] and len(self._recorded[slot]) < self.keep_inputs:
                self._recorded[slot][key] = Recorded(_clone(args), native)

    # -- what the sidecar does --------------------------------------------------------------------
    def installed_id(self, slot: str) -> str:
        return self._installed[slot].candidate_id

    def recorded(self, slot: str) -> list[Recorded]:
        with self._lock:
            return list(self._recorded[slot].values())

    def check(self, slot: str, kernel: Kernel) -> Comparison:
        """The kernel against vLLM's own op on every input set this worker recorded for the slot (the
        shapes and dtypes it really serves), judged by the project's one tolerance table."""
        sets = self.recorded(slot)
        if not sets:
            return Comparison(False, "no inputs recorded yet for this slot")
        for i, rec in enumerate(sets):
            with torch.inference_mode():
                want = _outputs(rec.native(*_clone(rec.args)))
                try:
                    got = _outputs(kernel(*_clone(rec.args)))
                except Exception as exc:  # a kernel that raises here is refused, never served
                    return Comparison(False, f"input set {i}: raised {type(exc).__name__}: {exc}"[:300])
            verdict = compare_all(got, want)
            if not verdict.passed:
                return Comparison(False, f"input set {i} {_signature(rec.args)[0]}: {verdict.detail}",
                                  verdict.max_abs_err, verdict.rel_err)
        return Comparison(True, f"matched vLLM's op on {len(sets)} input set(s)")

    def install(self, slot: str, candidate_id: str, kernel: Kernel, detail: str = "") -> None:
        self._installed[slot] = Installed(candidate_id, kernel)
        self._note(slot, "installed", candidate_id, detail)

    def restore(self, slot: str, detail: str = "") -> None:
        was = self._installed[slot].candidate_id
        self._installed[slot] = Installed(NATIVE, None)
        self._note(slot, "restored", was, detail)

    def refuse(self, slot: str, candidate_id: str, detail: str) -> None:
        self._note(slot, "refused", candidate_id, detail)

    def _note(self, slot: str, action: str, candidate_id: str, detail: str) -> None:
        with self._lock:
            self.events.append(TableEvent(time.time(), slot, action, candidate_id, detail))
            del self.events[:-200]

    def state(self) -> dict[str, Any]:
        """What the worker serves now (the adapter's state file and its log line say the same)."""
        with self._lock:
            return {
                "slots": {slot: {"installed": self._installed[slot].candidate_id,
                                 "calls": {cid: n for (s, cid), n in self.calls.items() if s == slot},
                                 "first_call_unix": {cid: t for (s, cid), t in self.first_call.items() if s == slot},
                                 "recorded_shapes": [str(k[0][0]) for k in self._recorded[slot]]}
                          for slot in SERVED_SLOTS},
                "events": [e.__dict__ for e in self.events],
                "methods": dict(self.methods),
            }
