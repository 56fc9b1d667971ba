"""Where a prompt-length distribution sits: the mean of its log-quantiles (upper half, all deciles).

A growth of prompts by a factor moves every log length, hence every log-quantile, by the same
amount, so any location estimator of the log lengths sees it. Which one decides how early the growth
can be told apart from the traffic's own wander. Measured on the shared traces (60 s blocks; the
shift of a x1.8 growth divided by the block-to-block spread of the estimator, higher is better):

    estimator                          azure code   azure conv   mooncake
    mean of log lengths                   2.5          3.8          1.4
    median of log lengths                 2.6         13.9          6.5
    mean of log-quantiles 0.5..0.9        3.6          5.3          5.2

Real traffic's short prompts come in bursts (a tool's health checks, a user's tab completions), so
the lower half of the distribution wanders minute to minute; the upper half, where most tokens and
the prefill cost are, is steadier. The main estimator averages the log-quantiles 0.5, 0.6, ..., 0.9;
a second one all deciles (see ESTIMATORS). Each one's sampling variance for independent requests
follows from the Bahadur representation of sample quantiles,
var = sum_ij (min(qi, qj) - qi qj) s_i s_j / (k^2 n), with s the sparsity (the slope of the
log-quantile function), read off the reference's own quantiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the two location estimators the prompt test runs (Bonferroni): the upper half, steady on bursty
# traffic, and all deciles, which also see a change that only removes or adds short prompts
# (mooncake's phase change: its short prompts vanish, the geometric mean doubles, the upper half 1.45x)
ESTIMATORS: dict[str, np.ndarray] = {
    "upper": np.array([0.5, 0.6, 0.7, 0.8, 0.9]),
    "deciles": np.arange(1, 10) / 10,
}
SPARSITY_STEP = 0.05  # quantile half-width of the finite difference that estimates the sparsity


@dataclass(frozen=True)
class Location:
    """One estimator's shift (log, current - reference), its variance for independent requests and
    its p-value against that plus the measured wander (checks.location_checks)."""

    shift: float
    variance: float
    pvalue: float


def log_quantiles(sorted_values: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Linearly interpolated quantiles of log(1 + value) of an ascending, non-empty array."""
    pos = qs * (sorted_values.size - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, sorted_values.size - 1)
    a, b = np.log1p(sorted_values[lo].astype(float)), np.log1p(sorted_values[hi].astype(float))
    return a + (b - a) * (pos - lo)


def locations(sorted_values: np.ndarray) -> tuple[float, ...]:
    """Each estimator's location (the mean of its log-quantiles) of an ascending, non-empty array."""
    return tuple(float(log_quantiles(sorted_values, qs).mean()) for qs in ESTIMATORS.values())


def unit_variances(sorted_values: np.ndarray) -> tuple[float, ...]:
    """n times the variance of each estimator over n independent draws from this distribution."""
    return tuple(_unit_variance(sorted_values, qs) for qs in ESTIMATORS.values())


def _unit_variance(sorted_values: np.ndarray, q: np.ndarray) -> float:
    above, below = np.minimum(q + SPARSITY_STEP, 0.999), np.maximum(q - SPARSITY_STEP, 0.001)
    sparsity = (log_quantiles(sorted_values, above) - log_quantiles(sorted_values, below)) / (above - below)
    sparsity = np.maximum(sparsity, 1e-3)  # ties (many equal lengths) would claim zero variance
    cov = (np.minimum.outer(q, q) - np.outer(q, q)) * np.outer(sparsity, sparsity)
    return float(cov.sum() / q.size**2)
