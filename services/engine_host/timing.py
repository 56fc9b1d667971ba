"""Honest A/B timing: warm-up excluded, sample-by-sample interleaving, distribution-free intervals, A/A spread.

Each round times the incumbent (A) and the candidate (B) on every work item (a shape bucket x call
site), alternating sample by sample (A B B A A B ..., the other way round in odd rounds), so drift,
bursts of load and position hit both sides. The per-round ratio is incumbent / candidate time over
the weighted per-step totals of the per-side median samples; the speedup is its median, with the sign
test's 95 % interval for that median (no assumption on the noise) widened by the A/A spread (the
incumbent's even samples against its odd ones) and never by less than a noise floor, so a difference
inside the noise never gets a lower bound above 1.

This module only does arithmetic on times. A `Runner` produces them: the harness's runners time a
sandbox from the harness's side of the process boundary (remote.py), so nothing the candidate runs
next to can touch the clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class Runner(Protocol):
    def calibrate(self, item: Item, warmup_calls: int) -> float:
        """Warm up on the item, then seconds one call takes."""
        ...

    def sample(self, item: Item, calls: int, offset: int) -> float:
        """Seconds one sample of `calls` calls took, fixed overhead included (`offset` picks where it starts)."""
        ...

    def overhead_s(self, item: Item) -> float:
        """Fixed cost of one sample that is not the op (a round trip to another process), as measured."""
        ...

    def max_calls(self, item: Item) -> int:
        """The most calls one sample may make (each call has an input set of its own, in memory)."""
        ...


@dataclass
class Item:
    """One timed work item: an op at a shape (a call site, or a captured group) and its weight."""

    key: str
    weight: float  # bucket weight x calls per step


@dataclass(frozen=True)
class Settings:
    rounds: int = 10
    samples: int = 5  # timed samples per side for each item in each round (the sides alternate sample by sample)
    target_sample_s: float = 2e-3  # calls per sample are batched until a sample lasts about this long
    max_inner: int = 200
    warmup_calls: int = 3
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
    per_round: list[float] = field(default_factory=list)  # each round's ratio (the speedup is their median)
    # the same weighted ratio over each item's median of all its samples, every round pooled
    speedup_pooled: float = 0.0
    # "captured" (inputs recorded from real forward passes) / "random": speedup and A/A over that group
    per_group: dict[str, dict[str, float]] = field(default_factory=dict)


def group_of(key: str) -> str:
    return "captured" if key.startswith("captured:") else "random"


OVERHEAD_SHARE = 25  # a sample lasts at least this many times its fixed overhead (so its noise is small)


def common_overhead_s(sides: Sequence[Runner], item: Item) -> float:
    """The one fixed cost subtracted from both sides' samples: the smaller of the two measurements. Both
    sides use the same transport, so a larger one is load during its measurement or a candidate that
    answers empty calls slowly; subtracting it from that side alone would hand it a speedup, while one
    common amount keeps which raw sample was faster."""
    return min(side.overhead_s(item) for side in sides)


def _calls_per_sample(once_s: float, s: Settings, overhead_s: float) -> int:
    """How many calls of `once_s` seconds (timed after the runner's warm-up) make one sample."""
    target = max(s.target_sample_s, OVERHEAD_SHARE * overhead_s)
    return int(min(max(1, target // max(once_s, 1e-7)), s.max_inner))


def _stats(per_round_s: np.ndarray, runs: int) -> Stats:
    us = per_round_s * 1e6
    return Stats(float(np.median(us)), float(np.percentile(us, 10)), float(np.percentile(us, 90)), runs)


COVERAGE = 0.95
# the fewest rounds whose [min, max] covers the median with COVERAGE (1 - 2 / 2**n): with 3 rounds it
# covers 75 %, and A/A comparisons of one kernel in two sandboxes came out 1.04x "faster" beyond it
MIN_ROUNDS = next(n for n in range(1, 64) if 1.0 - 2.0 / 2.0 ** n >= COVERAGE)


def median_interval(values: np.ndarray, coverage: float = COVERAGE) -> tuple[float, float]:
    """Distribution-free interval for the median (the sign test's order statistics): [x_(k), x_(n-k+1)]
    with the largest k whose coverage is at least `coverage`. It assumes nothing about the noise,
    which on a shared machine is bursty and heavy-tailed (a bootstrap of a few rounds is far too narrow
    there: A/A comparisons came out 1.2x "faster" beyond its interval)."""
    x = np.sort(values)
    n = len(x)

    def covers(k: int) -> bool:  # P(x_(k) <= median <= x_(n-k+1)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1)
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0 ** n >= coverage

    k = 1  # with too few rounds for the coverage: the widest, [min, max]
    while k + 1 <= (n + 1) // 2 and covers(k + 1):
        k += 1
    return float(x[k - 1]), float(x[n - k])


def compare(
    incumbent: Runner,
    candidate: Runner,
    items: Sequence[Item],
    settings: Settings = Settings(),
    progress: Callable[[str], None] = lambda _: None,
) -> Comparison:
    s = settings
    rounds = max(s.rounds, MIN_ROUNDS)  # fewer rounds cannot give the interval its coverage
    sides = (incumbent, candidate)
    inner: dict[str, int] = {}
    for item in items:
        once = [side.calibrate(item, s.warmup_calls) for side in sides]
        overhead = common_overhead_s(sides, item)
        inner[item.key] = min(min(_calls_per_sample(one, s, overhead) for one in once),
                              *(side.max_calls(item) for side in sides))
        progress(f"warm {item.key}")
    weights = np.array([it.weight for it in items])
    samples = max(s.samples, 2)  # the A/A spread compares a side's even and odd samples
    # [round, item, sample, side]: the two sides alternate sample by sample (A B, B A, A B, ... and the
    # other way round in odd rounds), so a burst of load on a shared machine, which lasts longer than a
    # sample, falls on both sides instead of on one side's whole block
    t = np.zeros((rounds, len(items), samples, 2))
    runs = [0, 0]
    for r in range(rounds):
        for j, item in enumerate(items):
            n = inner[item.key]
            for k in range(samples):
                first = (r + k) % 2
                for side in (first, 1 - first):
                    raw = sides[side].sample(item, n, r * 7 + j + k)
                    # re-read each time: a runner re-measures its overhead when it re-binds buffers
                    t[r, j, k, side] = max(raw - common_overhead_s(sides, item), 1e-9) / n
                    runs[side] += n
            progress(f"round {r + 1}/{rounds} {item.key}")  # keeps the host's hang timer honest
    per_round = np.median(t, axis=2)  # [round, item, side]
    inc, cand = per_round[..., 0], per_round[..., 1]
    x, y = inc @ weights, cand @ weights  # weighted per-step totals per round
    ratios = x / y
    # A/A: the incumbent against itself (its even samples against its odd ones), both as the relative
    # difference of the two medians and as the typical per-round difference; a noise floor on top
    aa_even, aa_odd = np.median(t[:, :, 0::2, 0], axis=2), np.median(t[:, :, 1::2, 0], axis=2)  # [round, item]
    a1, a2 = aa_even @ weights, aa_odd @ weights
    aa_spread = max(abs(float(np.median(a1)) / float(np.median(a2)) - 1.0), float(np.median(np.abs(a1 / a2 - 1.0))))
    widen = 1.0 + max(aa_spread, s.noise_floor)
    lo, hi = median_interval(ratios)
    per_item = {item.key: float(np.median(inc[:, j] / cand[:, j])) for j, item in enumerate(items)}
    pooled = np.median(t.transpose(1, 3, 0, 2).reshape(len(items), 2, -1), axis=2)  # [item, side]
    per_group: dict[str, dict[str, float]] = {}
    for g in sorted({group_of(it.key) for it in items}):
        w = np.array([it.weight if group_of(it.key) == g else 0.0 for it in items])
        g1, g2 = aa_even @ w, aa_odd @ w
        per_group[g] = {"speedup": float(np.median((inc @ w) / (cand @ w))),
                        "aa_spread": float(np.median(np.abs(g1 / g2 - 1.0))), "items": int((w > 0).sum())}
    return Comparison(
        incumbent=_stats(x, runs[0]),
        candidate=_stats(y, runs[1]),
        aa_spread=aa_spread,
        speedup=float(np.median(ratios)),
        speedup_lo=lo / widen,
        speedup_hi=hi * widen,
        per_item=per_item,
        per_round=[float(v) for v in ratios],
        speedup_pooled=float((pooled[:, 0] @ weights) / (pooled[:, 1] @ weights)),
        per_group=per_group,
    )
