"""Honest A/B timing: warm-up excluded, interleaved A/B/A' rounds, rotated inputs, bootstrap intervals.

Each round times the incumbent (A) and the candidate (B) three times on every work item (a shape
bucket x call site), A B A' in even rounds and B A B' in odd ones, so drift and position hit both
sides. The per-round ratio is incumbent / candidate time over the weighted per-step totals; the
speedup is its median, with a bootstrap 95 % interval widened by the A/A spread (the incumbent timed
against itself) and never by less than a noise floor, so a difference inside the noise never gets a
lower bound above 1.

Timers measure one callable; CPU uses perf_counter, CUDA events drop in with the same interface.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# bound at import, before any candidate module runs: patching time.perf_counter cannot fool the timer
from time import perf_counter as _perf_counter
from typing import Any, Protocol

import numpy as np


class Timer(Protocol):
    def measure(self, run: Callable[[], None]) -> float:
        """Seconds one execution of `run` took on the device."""
        ...


class CpuTimer:
    def measure(self, run: Callable[[], None]) -> float:
        start = _perf_counter()
        run()
        return _perf_counter() - start


class CudaTimer:
    """CUDA events around the timed region; synchronise once per measurement."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def measure(self, run: Callable[[], None]) -> float:
        self._start.record()
        run()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3


@dataclass
class Item:
    """One timed work item: a call site at a shape, with several pre-built input sets to rotate."""

    key: str
    weight: float  # bucket weight x calls per step
    inputs: list[tuple[Any, ...]]


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


def _run_calls(fn: Callable[..., Any], inputs: Sequence[tuple[Any, ...]], start: int, n: int) -> None:
    k = len(inputs)
    for j in range(n):
        fn(*inputs[(start + j) % k])


def _calibrate(fn: Callable[..., Any], item: Item, timer: Timer, s: Settings) -> int:
    """Warm up (compile, caches, allocator) and pick how many calls make one sample."""
    _run_calls(fn, item.inputs, 0, s.warmup_calls)
    once = max(timer.measure(lambda: _run_calls(fn, item.inputs, 0, 1)), 1e-7)
    return int(min(max(1, s.target_sample_s // once), s.max_inner))


def _block(fn: Callable[..., Any], item: Item, inner: int, timer: Timer, s: Settings, offset: int) -> float:
    """Median seconds per call over `samples` samples; one untimed call first absorbs the switch."""
    _run_calls(fn, item.inputs, offset, 1)
    times = [
        timer.measure(lambda i=i: _run_calls(fn, item.inputs, offset + i * inner, inner)) / inner
        for i in range(s.samples)
    ]
    return float(np.median(times))


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
    incumbent: Callable[..., Any],
    candidate: Callable[..., Any],
    items: list[Item],
    timer: Timer,
    settings: Settings = Settings(),
    progress: Callable[[str], None] = lambda _: None,
) -> Comparison:
    s = settings
    inner: dict[str, int] = {}
    for item in items:
        inner[item.key] = min(_calibrate(incumbent, item, timer, s), _calibrate(candidate, item, timer, s))
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
            for p, fn in enumerate(order):
                t[r, j, p] = _block(fn, item, n, timer, s, off)
                runs[id(fn)] += n * s.samples
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


def time_fn(fn: Callable[..., Any], item: Item, timer: Timer, settings: Settings = Settings()) -> Stats:
    """Median per-call time of one op on one item (profiling)."""
    inner = _calibrate(fn, item, timer, settings)
    per_call = [_block(fn, item, inner, timer, settings, r) for r in range(settings.rounds)]
    return _stats(np.array(per_call), inner * settings.samples * settings.rounds)
