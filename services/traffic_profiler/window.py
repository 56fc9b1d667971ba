"""Trace-time windows over the records the detector holds, as numpy columns.

Ingest appends to plain lists (cheap at 100k records/s); at an evaluation tick the new records are
moved into sorted numpy columns once, and every window after that is a binary search and a slice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class WindowData:
    start: float
    end: float
    t: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    hit: np.ndarray          # hit tokens, NaN where unknown
    tags: np.ndarray         # str per record
    experts: np.ndarray      # summed tokens per expert (empty when no record reports experts)
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # derived values (see `derived`)

    def derived(self, key: str, compute: Callable[[], Any]) -> Any:
        """A value computed from this (immutable) window once: a reference is compared at every tick."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    @property
    def n(self) -> int:
        return int(self.t.size)

    @property
    def duration(self) -> float:
        return max(self.end - self.start, 1e-9)

    def hit_known(self) -> np.ndarray:
        return ~np.isnan(self.hit)

    def hit_rate(self) -> float | None:
        """Prefix-cache token hit rate over the records that report it (or have block hashes)."""
        known = self.hit_known()
        if not known.any():
            return None
        tokens = self.prompt[known].sum()
        return float(self.hit[known].sum() / tokens) if tokens > 0 else None

    def select(self, mask: np.ndarray) -> WindowData:
        return WindowData(self.start, self.end, self.t[mask], self.prompt[mask], self.output[mask],
                          self.hit[mask], self.tags[mask], np.zeros(0, dtype=np.int64))


def empty(at: float) -> WindowData:
    z = np.zeros(0)
    return WindowData(at, at, z, z.astype(np.int64), z.astype(np.int64), z, z.astype(object),
                      z.astype(np.int64))


class RowStore:
    """The records of the recent past, ordered by arrival."""

    def __init__(self) -> None:
        self._new: list[tuple] = []
        self.t = np.zeros(0)
        self.prompt = np.zeros(0, dtype=np.int64)
        self.output = np.zeros(0, dtype=np.int64)
        self.hit = np.zeros(0)
        self.tags = np.zeros(0, dtype=object)
        self.experts = np.zeros((0, 0), dtype=np.int64)

    def append(self, t: float, prompt: int, output: int, hit: float, tag: str, experts: list[int]) -> None:
        self._new.append((t, prompt, output, hit, tag, experts))

    def __len__(self) -> int:
        return self.t.size + len(self._new)

    def _flush(self) -> None:
        if not self._new:
            return
        new, self._new = self._new, []
        n = len(new)
        width = max(self.experts.shape[1], max((len(r[5]) for r in new), default=0))
        experts = np.zeros((n, width), dtype=np.int64)
        for i, r in enumerate(new):
            if r[5]:
                experts[i, : len(r[5])] = r[5]
        old_experts = self.experts
        if old_experts.shape[1] < width:
            old_experts = np.pad(old_experts, ((0, 0), (0, width - old_experts.shape[1])))
        self.t = np.concatenate([self.t, np.fromiter((r[0] for r in new), float, n)])
        self.prompt = np.concatenate([self.prompt, np.fromiter((r[1] for r in new), np.int64, n)])
        self.output = np.concatenate([self.output, np.fromiter((r[2] for r in new), np.int64, n)])
        self.hit = np.concatenate([self.hit, np.fromiter((r[3] for r in new), float, n)])
        self.tags = np.concatenate([self.tags, np.array([r[4] for r in new], dtype=object)])
        self.experts = np.concatenate([old_experts, experts])
        if n and np.any(np.diff(self.t[-n - 1:]) < 0):  # late records: restore arrival order
            order = np.argsort(self.t, kind="stable")
            for name in ("t", "prompt", "output", "hit", "tags", "experts"):
                setattr(self, name, getattr(self, name)[order])

    def prune(self, before: float) -> None:
        """Forget records with arrival <= before."""
        self._flush()
        i = int(np.searchsorted(self.t, before, side="right"))
        if i:
            for name in ("t", "prompt", "output", "hit", "tags", "experts"):
                setattr(self, name, getattr(self, name)[i:])

    def window(self, start: float, end: float) -> WindowData:
        """Records with start < arrival <= end."""
        self._flush()
        lo = int(np.searchsorted(self.t, start, side="right"))
        hi = int(np.searchsorted(self.t, end, side="right"))
        return WindowData(start, end, self.t[lo:hi], self.prompt[lo:hi], self.output[lo:hi], self.hit[lo:hi],
                          self.tags[lo:hi], self.experts[lo:hi].sum(axis=0))


def concat(a: WindowData, b: WindowData) -> WindowData:
    """Join two adjacent windows (a before b)."""
    width = max(a.experts.size, b.experts.size)
    experts = np.pad(a.experts, (0, width - a.experts.size)) + np.pad(b.experts, (0, width - b.experts.size))
    return WindowData(
        a.start, b.end,
        np.concatenate([a.t, b.t]), np.concatenate([a.prompt, b.prompt]),
        np.concatenate([a.output, b.output]), np.concatenate([a.hit, b.hit]),
        np.concatenate([a.tags, b.tags]), experts,
    )
