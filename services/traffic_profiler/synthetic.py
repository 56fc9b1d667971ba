"""Synthetic traffic built from real traces: stationary streams and injected shifts.

Used by the evaluation harness (benchmarks/drift_eval.py) and the tests. A stationary stream is a
block bootstrap of a stretch of a real trace: random block_s-long blocks, laid end to end, so the
trace's own rate, burstiness and within-minute correlation are kept while nothing drifts. Optional
decorations make the other metrics observable: cached tokens (a per-request hit fraction from a
Beta law), a region tag, and MoE expert counts (top-k routing over Zipf-skewed experts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from services.traffic_profiler.records import Record


@dataclass(frozen=True)
class Decoration:
    """How each record is decorated; a shift swaps one Decoration for another at t0."""

    prompt_factor: float = 1.0
    hit_mean: float | None = None      # mean prefix-cache hit fraction (None: no cached tokens)
    eu_share: float | None = None      # share of requests tagged "eu" (others "us")
    eu_factor: float = 1.4             # eu prompts are this much longer
    expert_skew: float | None = None   # Zipf exponent of the expert popularity (None: no experts)
    experts: int = 16
    top_k: int = 2


def bootstrap_blocks(source: list[Record], block_s: float, start_s: float | None = None,
                     end_s: float | None = None) -> list[tuple[float, np.ndarray]]:
    """(start, indices into source) of each whole block_s block of source[start_s, end_s)."""
    t = np.array([r.arrival_s for r in source])
    lo = t[0] if start_s is None else start_s
    hi = t[-1] if end_s is None else end_s
    return [(s, np.flatnonzero((t >= s) & (t < s + block_s))) for s in np.arange(lo, hi - block_s + 1e-9, block_s)]


def block_bootstrap(source: list[Record], duration_s: float, *, block_s: float = 60.0, seed: int = 0,
                    start_s: float | None = None, end_s: float | None = None) -> list[Record]:
    """A stationary stream of duration_s from random blocks of source[start_s, end_s)."""
    rng = np.random.default_rng(seed)
    blocks = bootstrap_blocks(source, block_s, start_s, end_s)
    out: list[Record] = []
    offset = 0.0
    while offset < duration_s:
        s, idx = blocks[int(rng.integers(len(blocks)))]
        out.extend(replace(source[i], arrival_s=offset + source[i].arrival_s - s, block_hashes=[]) for i in idx)
        offset += block_s
    return out


def decorate(records: list[Record], before: Decoration, after: Decoration, t0: float, seed: int = 0) -> list[Record]:
    """Apply `before` to the records earlier than t0 and `after` to the rest (new Record objects)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in records:
        d = before if r.arrival_s < t0 else after
        prompt = max(1, round(r.prompt_tokens * d.prompt_factor))
        tag, cached, experts = "", None, []
        if d.eu_share is not None:
            tag = "eu" if rng.random() < d.eu_share else "us"
            if tag == "eu":
                prompt = max(1, round(prompt * d.eu_factor))
        if d.hit_mean is not None:
            cached = int(prompt * rng.beta(4 * d.hit_mean + 0.1, 4 * (1 - d.hit_mean) + 0.1))
        if d.expert_skew is not None:
            weights = 1.0 / np.arange(1, d.experts + 1) ** d.expert_skew
            experts = rng.multinomial((prompt + r.output_tokens) * d.top_k, weights / weights.sum()).tolist()
        out.append(replace(r, prompt_tokens=prompt, cached_tokens=cached, tag=tag, expert_counts=experts))
    return out


@dataclass(frozen=True)
class Shift:
    name: str
    metrics: tuple[str, ...]   # what a detector should report
    before: Decoration
    after: Decoration


BASE = Decoration(hit_mean=0.5, eu_share=0.2, expert_skew=0.6)
SHIFTS: tuple[Shift, ...] = (
    Shift("prompts +80%", ("prompt_tokens",), BASE, replace(BASE, prompt_factor=1.8)),
    Shift("regional mix 1.4x", ("tag_mix", "prompt_tokens"), BASE, replace(BASE, eu_share=0.8)),
    Shift("prompts x2, hit-rate drop", ("prompt_tokens", "prefix_hit_rate"), BASE,
          replace(BASE, prompt_factor=2.0, hit_mean=0.15)),
    Shift("expert skew change", ("expert_load",), BASE, replace(BASE, expert_skew=1.2)),
)


def first_detection(drifts: list, t0: float, metrics: tuple[str, ...], horizon_s: float,
                    reported: Callable[[object], set[str]]) -> float | None:
    """Delay from t0 to the first drift at or after t0 (within horizon_s) that reports one of metrics."""
    for d in drifts:
        if t0 <= d.t_s <= t0 + horizon_s and reported(d) & set(metrics):
            return d.t_s - t0
    return None
