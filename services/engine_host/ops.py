"""The one op table: every swappable op of a model, slots and regions alike, under one API.

A slot (rmsnorm, linear, ...) is a plain attribute the model reads (`table.rmsnorm(...)`: no lookup
cost). A region (attn_block, mlp_block, layer, step) is a block of the model: installing a kernel for
it binds `kernel(module, *args)` as the forward of every module of that block's type. Both kinds
share ids, versions, history, snapshots and rollback, so everything above the table (swap, benchmark,
graphs, the verifier, the registry) treats them the same. Each change bumps the op's version, which
tells the CUDA-graph code (cuda_graphs.py) exactly which captures a swap invalidated.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from services.common.slot_specs import OPS, REGIONS, SLOTS
from services.engine_host.models.llama import Attention, FeedForward, Transformer, TransformerBlock
from services.engine_host.slots import REFERENCE_ID, REFERENCES

REGION_MODULES: dict[str, type[nn.Module]] = {
    "attn_block": Attention, "mlp_block": FeedForward, "layer": TransformerBlock, "step": Transformer,
}
assert set(REGION_MODULES) == set(REGIONS)


class UnknownOp(KeyError):
    pass


@dataclass(frozen=True)
class Entry:
    fn: Callable[..., Any] | None  # a region's None: the module's own forward
    candidate_id: str


def check_op(op: str) -> None:
    if op not in OPS:
        raise UnknownOp(f"unknown op {op!r}; slots: {', '.join(SLOTS)}; regions: {', '.join(REGIONS)}")


class OpTable:
    rmsnorm: Callable[..., Tensor]
    add_rmsnorm: Callable[..., tuple[Tensor, Tensor]]
    rope: Callable[..., Tensor]
    attention: Callable[..., Tensor]
    silu_mul: Callable[..., Tensor]
    linear: Callable[..., Tensor]
    sample: Callable[..., Tensor]

    def __init__(self) -> None:
        self.model: nn.Module | None = None
        self._entries: dict[str, Entry] = {}
        self._known: dict[str, dict[str, Callable[..., Any] | None]] = {op: {} for op in OPS}
        self.versions: dict[str, int] = dict.fromkeys(OPS, 0)
        self.version = 0
        self._recording: set[str] | None = None
        for op in OPS:
            self._set(op, Entry(REFERENCES.get(op), REFERENCE_ID))

    def attach(self, model: nn.Module) -> None:
        """The model whose blocks the region entries bind to (called once it is built)."""
        self.model = model
        for region in REGIONS:
            self._bind(region, self._entries[region].fn)

    # -- reading ----------------------------------------------------------------------------
    def installed_id(self, op: str) -> str:
        check_op(op)
        return self._entries[op].candidate_id

    def ids(self) -> dict[str, str]:
        return {op: e.candidate_id for op, e in self._entries.items()}

    def installed(self, op: str) -> Callable[..., Any]:
        """The op as a callable: a slot's `fn(*args)`, a region's `fn(module, *args)`."""
        check_op(op)
        fn = self._entries[op].fn
        if fn is None:  # a region on its reference: the class's own forward
            forward: Callable[..., Any] = REGION_MODULES[op].forward
            return forward
        return fn

    def modules(self, region: str) -> list[nn.Module]:
        if region not in REGION_MODULES:
            raise UnknownOp(f"unknown region {region!r}; known: {', '.join(REGIONS)}")
        if self.model is None:
            raise RuntimeError("the op table is not attached to a model")
        kind = REGION_MODULES[region]
        return [m for m in self.model.modules() if type(m) is kind]

    # -- changing ---------------------------------------------------------------------------
    def swap(self, op: str, fn: Callable[..., Any], candidate_id: str) -> str:
        """Install `fn` for the op; returns the id it replaced."""
        check_op(op)
        previous = self._entries[op].candidate_id
        self._known[op][candidate_id] = fn
        self._set(op, Entry(fn, candidate_id))
        return previous

    def rollback(self, op: str, to_candidate_id: str = "") -> str:
        """Back to the reference (empty id) or an op this table held before; returns the replaced id."""
        check_op(op)
        target = to_candidate_id or REFERENCE_ID
        if target != REFERENCE_ID and target not in self._known[op]:
            raise KeyError(f"op {op!r} never held candidate {target!r}")
        previous = self._entries[op].candidate_id
        if previous == target:  # nothing changes: no version bump, so no graph re-capture
            return previous
        fn = REFERENCES.get(op) if target == REFERENCE_ID else self._known[op][target]
        self._set(op, Entry(fn, target))
        return previous

    def snapshot(self) -> dict[str, Entry]:
        return dict(self._entries)

    def restore(self, snapshot: dict[str, Entry]) -> None:
        for op, entry in snapshot.items():
            if self._entries[op] is not entry:
                self._set(op, entry)

    @contextmanager
    def reference_only(self) -> Iterator[None]:
        saved = self.snapshot()
        for op in OPS:
            self.rollback(op)
        try:
            yield
        finally:
            self.restore(saved)

    # -- observing --------------------------------------------------------------------------
    @contextmanager
    def wrapped(self, wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
        """Temporarily wrap every slot's op (capture, per-slot profiling); restored afterwards."""
        saved = {slot: self._entries[slot] for slot in SLOTS}
        for slot, entry in saved.items():
            assert entry.fn is not None
            setattr(self, slot, wrap(slot, entry.fn))
        try:
            yield
        finally:
            for slot, entry in saved.items():
                setattr(self, slot, entry.fn)

    @contextmanager
    def recording(self, used: set[str]) -> Iterator[None]:
        """Note every replaced region a forward pass runs through (reference blocks need no note: the
        slots they call are what a capture depends on, and `wrapped` records those)."""
        self._recording = used
        try:
            yield
        finally:
            self._recording = None

    # -- internals --------------------------------------------------------------------------
    def _set(self, op: str, entry: Entry) -> None:
        self._entries[op] = entry
        if op in SLOTS:
            setattr(self, op, entry.fn)
        elif self.model is not None:
            self._bind(op, entry.fn)
        self.version += 1
        self.versions[op] += 1

    def _bind(self, region: str, kernel: Callable[..., Any] | None) -> None:
        for module in self.modules(region):
            if kernel is None:
                module.__dict__.pop("forward", None)  # back to the class's own forward
            else:
                module.forward = types.MethodType(self._region_forward(region, kernel), module)

    def _region_forward(self, region: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
        def forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if self._recording is not None:
                self._recording.add(region)
            return kernel(module, *args, **kwargs)

        return forward
