"""Honest A/B timing: warm-up excluded, interleaved A/B/A' rounds, bootstrap intervals, A/A spread.

Each round times the incumbent (A) and the candidate (B) three times on every work item (a shape
bucket x call site), A B A' in even rounds and B A B' in odd ones, so drift and position hit both
sides. The per-round ratio is incumbent / candidate time over the weighted per-step totals; the
speedup is its median, with a bootstrap 95 % interval widened by the A/A spread (the incumbent timed
against itself) and never by less than a noise floor, so a difference inside the noise never gets a
lower bound above 1.

This module only does arithmetic on times. A `Runner` produces them: the harness's runners time a
sandbox from the harness's side of the process boundary (remote.py), so nothing the candidate runs
next to can touch the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class Runner(Protocol):
    def calibrate(self, item: Item, warmup_calls: int) -> float:
        """Warm up on the item, then seconds one call takes."""
        ...

    def block(self, item: Item, calls: int, samples: int, offset: int) -> float:
        """Median seconds per call over `samples` samples of `calls` calls each."""
        ...

    def overhead_s(self, item: Item) -> float:
        """Fixed cost of one sample that is not the op (a round trip to another process)."""
        ...


@dataclass
class Item:
    """One timed work item: an op at a shape (a call site, or a captured group) and its weight."""

    key: str
    weight: float  # bucket weight x calls per step


@dataclass(frozen=True)
class Settings:
    rounds: int = 10
    samples: int = 5  # timed samples per block (a block = one fn on one item in one round)
    target_sample_s: float = 2e-3  # calls per sample are batched until a sample lasts about this long
    max_inner: int = 200
    warmup_calls: int = 3
    bootstrap: int = 2000
    noise_floor: float = 0.01  # the interval is widened by at least this much: tiny "wins" are noise


@dataclass
class Stats:
    median_us: float
    p10_us: float
    p90_us: float
    runs: int


@dataclass
class Comparison:
    incumbent: Stats
    candidate: Stats
    aa_spread: float
    speedup: float
    speedup_lo: float
    speedup_hi: float
    per_item: dict[str, float] = field(default_factory=dict)  # item key → speedup on that item
    # "captured" (inputs recorded from real forward passes) / "random": speedup and A/A over that group
    per_group: dict[str, dict[str, float]] = field(default_factory=dict)


def group_of(key: str) -> str:
    return "captured" if key.startswith("captured:") else "random"


OVERHEAD_SHARE = 25  # a sample lasts at least this many times its fixed overhead (so its noise is small)


def _inner(runner: Runner, item: Item, s: Settings) -> int:
    """How many calls make one sample (after the runner's warm-up: compile, caches, allocator)."""
    once = max(runner.calibrate(item, s.warmup_calls), 1e-7)
    target = max(s.target_sample_s, OVERHEAD_SHARE * runner.overhead_s(item))
    return int(min(max(1, target // once), s.max_inner))


def _stats(per_round_s: np.ndarray, runs: int) -> Stats:
    us = per_round_s * 1e6
    return Stats(float(np.median(us)), float(np.percentile(us, 10)), float(np.percentile(us, 90)), runs)


def bootstrap_median(values: np.ndarray, n: int, seed: int = 0) -> tuple[float, float]:
    if len(values) < 2:
        return float(values[0]), float(values[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n, len(values)))
    medians = np.median(values[idx], axis=1)
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def compare(
    incumbent: Runner,
    candidate: Runner,
    items: Sequence[Item],
    settings: Settings = Settings(),
    progress: Callable[[str], None] = lambda _: None,
) -> Comparison:
    s = settings
    inner: dict[str, int] = {}
    for item in items:
        inner[item.key] = min(_inner(incumbent, item, s), _inner(candidate, item, s))
        progress(f"warm {item.key}")
    weights = np.array([it.weight for it in items])
    # [round, item, position]: even rounds run A B A', odd rounds B A B', so neither side always
    # sits in the middle (a position bias would otherwise look like a speedup)
    t = np.zeros((s.rounds, len(items), 3))
    runs = {id(incumbent): 0, id(candidate): 0}
    for r in range(s.rounds):
        order = (incumbent, candidate, incumbent) if r % 2 == 0 else (candidate, incumbent, candidate)
        for j, item in enumerate(items):
            n, off = inner[item.key], r * 7 + j
            for p, runner in enumerate(order):
                t[r, j, p] = runner.block(item, n, s.samples, off)
                runs[id(runner)] += n * s.samples
            progress(f"round {r + 1}/{s.rounds} {item.key}")  # keeps the host's hang timer honest
    even, odd = t[0::2], t[1::2]
    inc = np.concatenate([(even[..., 0] + even[..., 2]) / 2, odd[..., 1]])  # [rounds, items]
    cand = np.concatenate([even[..., 1], (odd[..., 0] + odd[..., 2]) / 2])
    x, y = inc @ weights, cand @ weights  # weighted per-step totals per round
    ratios = x / y
    # A/A: the incumbent against itself in the even rounds (first vs second), both as the relative
    # difference of the two medians and as the typical per-round difference; a noise floor on top
    a1, a2 = even[..., 0] @ weights, even[..., 2] @ weights
    aa_spread = max(abs(float(np.median(a1)) / float(np.median(a2)) - 1.0), float(np.median(np.abs(a1 / a2 - 1.0))))
    widen = 1.0 + max(aa_spread, s.noise_floor)
    lo, hi = bootstrap_median(ratios, s.bootstrap)
    per_item = {item.key: float(np.median(inc[:, j] / cand[:, j])) for j, item in enumerate(items)}
    per_group: dict[str, dict[str, float]] = {}
    for g in sorted({group_of(it.key) for it in items}):
        w = np.array([it.weight if group_of(it.key) == g else 0.0 for it in items])
        g1, g2 = even[..., 0] @ w, even[..., 2] @ w
        per_group[g] = {"speedup": float(np.median((inc @ w) / (cand @ w))),
                        "aa_spread": float(np.median(np.abs(g1 / g2 - 1.0))), "items": int((w > 0).sum())}
    return Comparison(
        incumbent=_stats(x, runs[id(incumbent)]),
        candidate=_stats(y, runs[id(candidate)]),
        aa_spread=aa_spread,
        speedup=float(np.median(ratios)),
        speedup_lo=lo / widen,
        speedup_hi=hi * widen,
        per_item=per_item,
        per_group=per_group,
    )
