"""Window statistics on numpy arrays; the tests themselves come from scipy.stats.

Token counts are heavy-tailed, so histograms use log2 (octave) bins; PSI is computed on the same
bins with additive smoothing, so an empty bin does not make it infinite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QUANTILES = (0.10, 0.50, 0.90, 0.99)
# octave bins: [0,1), [1,2), [2,4), ..., [2^23, inf): every token count lands in exactly one
LOG_EDGES = np.concatenate([[0.0], 2.0 ** np.arange(0, 24), [np.inf]])


@dataclass(frozen=True)
class Summary:
    p10: float
    p50: float
    p90: float
    p99: float
    mean: float

    @classmethod
    def of(cls, values: np.ndarray) -> Summary:
        if values.size == 0:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0)
        p10, p50, p90, p99 = (float(v) for v in np.quantile(values, QUANTILES))
        return cls(p10, p50, p90, p99, float(values.mean()))


def log_histogram(values: np.ndarray) -> np.ndarray:
    """Counts per octave bin (LOG_EDGES): bin 0 holds zeros, bin k holds [2^(k-1), 2^k)."""
    index = np.searchsorted(LOG_EDGES, values, side="right") - 1
    return np.bincount(index, minlength=LOG_EDGES.size - 1)


def psi(expected: np.ndarray, actual: np.ndarray, smoothing: float = 0.5) -> float:
    """Population stability index between two count vectors over the same categories."""
    e = expected.astype(float) + smoothing
    a = actual.astype(float) + smoothing
    e /= e.sum()
    a /= a.sum()
    return float(np.sum((a - e) * np.log(a / e)))


def ks(reference: np.ndarray, current: np.ndarray) -> float:
    """Two-sample KS distance (the statistic of scipy.stats.ks_2samp).

    Computed from the two sorted samples directly: ks_2samp also derives a p-value for independent
    samples, which the detector replaces by its burst-adjusted one (noise.py) and which costs more
    than the distance itself at every tick.
    """
    return ks_sorted(np.sort(reference), np.sort(current))


def ks_sorted(a: np.ndarray, b: np.ndarray) -> float:
    """`ks` of two already sorted samples."""
    # the ECDFs only step at data values, so their distance is evaluated at the distinct values of
    # both samples: token counts repeat a lot, and a reference of a fleet's 15 minutes holds millions
    both = np.union1d(_distinct_sorted(a), _distinct_sorted(b))
    cdf_a = np.searchsorted(a, both, side="right") / a.size
    cdf_b = np.searchsorted(b, both, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array (np.unique without its sort)."""
    if values.size < 2:
        return values
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def index_of_dispersion(arrivals: np.ndarray, start: float, end: float) -> float:
    """Variance / mean of per-second arrival counts over [start, end): 1 for Poisson, >1 bursty."""
    seconds = max(int(np.ceil(end - start)), 1)
    if arrivals.size == 0:
        return 0.0
    counts = np.bincount(np.clip((arrivals - start).astype(np.int64), 0, seconds - 1), minlength=seconds)
    mean = counts.mean()
    return float(counts.var() / mean) if mean > 0 else 0.0


def change_point(series: np.ndarray, baseline: float) -> int:
    """Index where a mean shift away from a known baseline most likely began (CUSUM scan)."""
    n = series.size
    if n < 2:
        return 0
    tail = np.cumsum((series - baseline)[::-1])[::-1]  # tail[k] = sum of series[k:] - baseline
    lengths = np.arange(n, 0, -1, dtype=float)
    return int(np.argmax(tail**2 / lengths))


def ecdf_positions(reference_sorted: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mid-rank position of each value in the reference distribution, in [0, 1] (0.5 = no change)."""
    lo = np.searchsorted(reference_sorted, values, side="left")
    hi = np.searchsorted(reference_sorted, values, side="right")
    return (lo + hi) / (2.0 * max(reference_sorted.size, 1))


def category_psi(before: dict[str, float], after: dict[str, float]) -> float:
    keys = sorted(set(before) | set(after))
    return psi(np.array([before.get(k, 0.0) for k in keys]), np.array([after.get(k, 0.0) for k in keys]))
