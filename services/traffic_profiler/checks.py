"""One comparison per metric between the reference window and the current one.

A length distribution counts as moved only when the effect is large (KS distance >= ks_min AND
PSI >= psi_min) and the KS p-value is small; on big windows p-values alone flag everything.
Rates and hit rates use effect sizes directly (bursty traffic makes count tests overconfident),
and the detector adds persistence on top of every check.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.noise import ks_pvalue, ks_ratio, psi_pvalue, psi_ratio
from services.traffic_profiler.stats import category_psi, ks, log_histogram, psi
from services.traffic_profiler.window import WindowData

METRICS = ("prompt_tokens", "output_tokens", "arrival_rate", "prefix_hit_rate", "expert_load", "tag_mix")


@dataclass(frozen=True)
class Check:
    metric: str
    before: float
    after: float
    over: bool                # strong enough to fire (with persistence)
    moved: bool               # notable: listed in an event another metric fired
    ks: float = 0.0
    psi: float = 0.0
    pvalue: float = 1.0
    ks_ratio: float = 0.0     # statistics relative to independent samples (noise.py), for phi
    psi_ratio: float = 0.0


def length_check(metric: str, ref: np.ndarray, cur: np.ndarray, phi: tuple[float, float],
                 cfg: DetectorConfig) -> Check | None:
    """KS and PSI on octave bins, each with its burst-adjusted p-value; phi = (KS, PSI) design effects."""
    if ref.size < cfg.min_records or cur.size < cfg.min_records:
        return None
    n, m = ref.size, cur.size
    d = ks(ref, cur)
    h_ref, h_cur = log_histogram(ref), log_histogram(cur)
    df = int(np.count_nonzero(h_ref + h_cur)) - 1
    index = psi(h_ref, h_cur)
    p = min(1.0, 2 * min(ks_pvalue(d, n, m, phi[0]), psi_pvalue(index, n, m, df, phi[1])))  # Bonferroni
    big = d >= cfg.ks_min and index >= cfg.psi_min
    return Check(metric, float(np.median(ref)), float(np.median(cur)), big and p <= cfg.p_max,
                 big and p <= cfg.p_moved, d, index, p, ks_ratio(d, n, m), psi_ratio(index, n, m, df))


def hit_rate_check(ref: WindowData, cur: WindowData, cfg: DetectorConfig) -> Check | None:
    if ref.hit_known().sum() < cfg.min_records or cur.hit_known().sum() < cfg.min_records:
        return None
    before, after = ref.hit_rate(), cur.hit_rate()
    if before is None or after is None:
        return None
    delta = abs(after - before)
    return Check("prefix_hit_rate", before, after, delta >= cfg.hit_delta_min, delta >= cfg.hit_delta_min / 2)


def _per_minute(w: WindowData) -> np.ndarray:
    minutes = max(int(w.duration // 60), 1)
    index = np.clip(((w.t - w.start) // 60).astype(np.int64), 0, minutes - 1)
    return np.bincount(index, minlength=minutes).astype(float)


def rate_check(ref: WindowData, cur: WindowData, cfg: DetectorConfig) -> Check | None:
    """Arrival rates of the reference and the (longer) rate window: a large ratio that is also
    significant against the minute-to-minute variability (Welch's t-test on per-minute counts, which
    absorbs burstiness that a Poisson test would call drift)."""
    if ref.n < cfg.min_records or cur.duration < cfg.rate_window_s - 1e-6 or ref.duration < 180:
        return None
    before = ref.n / ref.duration
    after = cur.n / cur.duration
    ratio = (after + 1e-9) / (before + 1e-9)
    factor = max(ratio, 1 / ratio)
    a, b = _per_minute(ref), _per_minute(cur)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # degenerate per-minute counts: p is NaN, handled
        p = float(sps.ttest_ind(a, b, equal_var=False).pvalue) if a.var() + b.var() > 0 else 0.0
    p = 1.0 if np.isnan(p) else p
    return Check("arrival_rate", before, after, factor >= cfg.rate_ratio_min and p <= cfg.rate_p_max,
                 factor >= cfg.rate_ratio_min and p <= cfg.rate_p_max, pvalue=p)


def expert_check(ref: WindowData, cur: WindowData, cfg: DetectorConfig) -> Check | None:
    if ref.experts.sum() <= 0 or cur.experts.sum() <= 0:
        return None
    width = max(ref.experts.size, cur.experts.size)
    a = np.pad(ref.experts, (0, width - ref.experts.size))
    b = np.pad(cur.experts, (0, width - cur.experts.size))
    index = psi(a, b)
    # summary value: the largest expert's share relative to an even split (1.0 = balanced)
    before = float(a.max() / a.sum() * width)
    after = float(b.max() / b.sum() * width)
    return Check("expert_load", before, after, index >= cfg.expert_psi_min, index >= cfg.expert_psi_min / 2,
                 psi=index)


def tag_mix_check(ref: WindowData, cur: WindowData, cfg: DetectorConfig) -> Check | None:
    """The mix of tags (regions, tenants) moved; summary value: share of the tag that moved most."""
    if ref.n < cfg.min_records or cur.n < cfg.min_records:
        return None
    ref_tags, ref_counts = np.unique(ref.tags.astype(str), return_counts=True)
    cur_tags, cur_counts = np.unique(cur.tags.astype(str), return_counts=True)
    before = dict(zip(ref_tags.tolist(), ref_counts.astype(float).tolist(), strict=True))
    after = dict(zip(cur_tags.tolist(), cur_counts.astype(float).tolist(), strict=True))
    keys = sorted(set(before) | set(after))
    if len(keys) < 2:
        return None
    table = np.array([[before.get(k, 0.0) for k in keys], [after.get(k, 0.0) for k in keys]])
    pvalue = float(sps.chi2_contingency(table + 0.5)[1])
    index = category_psi(before, after)
    shares = table / table.sum(axis=1, keepdims=True)
    moved = int(np.argmax(np.abs(shares[1] - shares[0])))
    over = index >= cfg.tag_psi_min and pvalue <= cfg.p_max
    notable = index >= cfg.tag_psi_min / 2 and pvalue <= cfg.p_moved
    return Check("tag_mix", float(shares[0, moved]), float(shares[1, moved]), over, notable, psi=index,
                 pvalue=pvalue)


def check(metric: str, ref: WindowData, cur: WindowData, phi: tuple[float, float],
          cfg: DetectorConfig) -> Check | None:
    """Compare one metric; phi = the (KS, PSI) design effects (length metrics only)."""
    if metric == "prompt_tokens":
        return length_check(metric, ref.prompt, cur.prompt, phi, cfg)
    if metric == "output_tokens":
        return length_check(metric, ref.output, cur.output, phi, cfg)
    if metric == "arrival_rate":
        return rate_check(ref, cur, cfg)
    if metric == "prefix_hit_rate":
        return hit_rate_check(ref, cur, cfg)
    if metric == "expert_load":
        return expert_check(ref, cur, cfg)
    if metric == "tag_mix":
        return tag_mix_check(ref, cur, cfg)
    raise ValueError(f"unknown metric {metric}")
