"""Slot reference implementations and the slot table the model calls every swappable op through.

The references are the plain torch a user would write (gpt-fast style), never a deliberately slow
baseline. Signatures are exactly those of services/common/slot_specs.py. The table is the only
mutable global-ish state of a model: a swap replaces one entry between steps; `version` (and the
per-slot versions) tell later CUDA-graph code which captures a swap invalidated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from services.common.slot_specs import SLOTS

REFERENCE_ID = "reference"


def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # x [B,S,E], weight [E] -> [B,S,E] in x.dtype, normalised in float32
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    # x, residual [B,S,E] -> (rmsnorm(x + residual), x + residual)
    h = x + residual
    return rmsnorm(h, weight, eps), h


def rope(x: Tensor, freqs_cis: Tensor) -> Tensor:
    # x [B,S,H,D], freqs_cis [S,D/2,2] (cos, sin) -> [B,S,H,D]; rotates interleaved pairs
    xs = x.float().reshape(*x.shape[:-1], -1, 2)  # [B,S,H,D/2,2]
    fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)  # [1,S,1,D/2,2]
    out = torch.stack(
        [xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1],
         xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]],
        dim=-1,
    )
    return out.flatten(3).type_as(x)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    # q [B,Hq,S,D], k/v [B,Hkv,T,D], mask [1|B,1,S,T] bool (True = attend) -> [B,Hq,S,D]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.size(1) != k.size(1))


def silu_mul(gate: Tensor, up: Tensor) -> Tensor:
    # gate, up [B,S,I] -> [B,S,I]
    return F.silu(gate) * up


def linear(x: Tensor, weight: Tensor) -> Tensor:
    # x [...,K], weight [N,K] -> [...,N]
    return F.linear(x, weight)


def sample(logits: Tensor) -> Tensor:
    # logits [B,V] -> greedy ids [B] int64 (argmax returns the lowest index on ties)
    return torch.argmax(logits, dim=-1)


REFERENCES: dict[str, Callable[..., Any]] = {
    "rmsnorm": rmsnorm,
    "add_rmsnorm": add_rmsnorm,
    "rope": rope,
    "attention": attention,
    "silu_mul": silu_mul,
    "linear": linear,
    "sample": sample,
}
assert set(REFERENCES) == set(SLOTS), "every slot in slot_specs needs a reference and nothing else"


@dataclass(frozen=True)
class Entry:
    fn: Callable[..., Any]
    candidate_id: str


class SlotTable:
    """name → callable. The model reads plain attributes (`table.rmsnorm(...)`): no lookup cost."""

    rmsnorm: Callable[..., Tensor]
    add_rmsnorm: Callable[..., tuple[Tensor, Tensor]]
    rope: Callable[..., Tensor]
    attention: Callable[..., Tensor]
    silu_mul: Callable[..., Tensor]
    linear: Callable[..., Tensor]
    sample: Callable[..., Tensor]

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._known: dict[str, dict[str, Callable[..., Any]]] = {s: {REFERENCE_ID: f} for s, f in REFERENCES.items()}
        self.version = 0
        self.slot_versions: dict[str, int] = dict.fromkeys(REFERENCES, 0)
        for slot, fn in REFERENCES.items():
            self._set(slot, Entry(fn, REFERENCE_ID))

    def _set(self, slot: str, entry: Entry) -> None:
        setattr(self, slot, entry.fn)
        self._entries[slot] = entry
        self.version += 1
        self.slot_versions[slot] += 1

    def _check(self, slot: str) -> None:
        if slot not in REFERENCES:
            raise KeyError(f"unknown slot {slot!r}; known: {', '.join(REFERENCES)}")

    def installed_id(self, slot: str) -> str:
        self._check(slot)
        return self._entries[slot].candidate_id

    def installed(self, slot: str) -> Callable[..., Any]:
        self._check(slot)
        return self._entries[slot].fn

    def ids(self) -> dict[str, str]:
        return {slot: e.candidate_id for slot, e in self._entries.items()}

    def swap(self, slot: str, fn: Callable[..., Any], candidate_id: str) -> str:
        """Install `fn` as the slot's op; returns the id it replaced."""
        self._check(slot)
        previous = self._entries[slot].candidate_id
        self._known[slot][candidate_id] = fn
        self._set(slot, Entry(fn, candidate_id))
        return previous

    def rollback(self, slot: str, to_candidate_id: str = "") -> str:
        """Re-install the reference (empty id) or an op this table held before; returns the replaced id."""
        self._check(slot)
        target = to_candidate_id or REFERENCE_ID
        if target not in self._known[slot]:
            raise KeyError(f"slot {slot!r} never held candidate {target!r}")
        previous = self._entries[slot].candidate_id
        if previous == target:  # nothing changes: no version bump, so no graph re-capture
            return previous
        self._set(slot, Entry(self._known[slot][target], target))
        return previous

    def snapshot(self) -> dict[str, Entry]:
        return dict(self._entries)

    def restore(self, snapshot: dict[str, Entry]) -> None:
        for slot, entry in snapshot.items():
            if self._entries[slot] is not entry:
                self._set(slot, entry)

    @contextmanager
    def reference_only(self) -> Iterator[None]:
        """Every slot on its reference op for the duration (restored afterwards)."""
        saved = self.snapshot()
        for slot, fn in REFERENCES.items():
            if self._entries[slot].candidate_id != REFERENCE_ID:
                self._set(slot, Entry(fn, REFERENCE_ID))
        try:
            yield
        finally:
            self.restore(saved)

    @contextmanager
    def wrapped(self, wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
        """Temporarily wrap every installed op (capture, per-slot profiling); restored afterwards."""
        saved = self.snapshot()
        for slot, entry in saved.items():
            setattr(self, slot, wrap(slot, entry.fn))
        try:
            yield
        finally:
            for slot, entry in saved.items():
                setattr(self, slot, entry.fn)
