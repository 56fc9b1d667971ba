"""How much a window's length distribution wanders on its own: design effects for KS and PSI.

Real traffic is bursty: one user's burst brings many near-identical requests, so a window holds
fewer independent samples than requests, and plain tests flag bursts as drift. The detector keeps,
per metric, window size and statistic, the ratios of the statistic on quiet ticks to what
independent samples of the same sizes would give:

    KS:  r = D / median KS distance of independent samples     (Kolmogorov law, scipy.special)
    PSI: r = PSI * n_h / median of chi2(df)                    (n_h = n m / (n + m); PSI ~ chi2 / n_h)

Their scale phi^2 (about 1 for independent requests, larger for clustered ones) makes each test
cluster-robust: the KS p-value uses effective sample sizes n / phi^2, the PSI one the statistic
PSI * n_h / phi^2 against chi2(df). A drift has to stand out from the traffic's usual
window-to-window wander, whatever its burstiness. The location test (difference of mean log lengths,
checks.py) is treated the same way: z / phi against the normal law, phi from its quiet |z| values.
The scale is read off a quantile (phi_quantile) of the
ratios (divided by the same quartile for independent samples), so a slow drift that has not fired
yet, which inflates the upper ratios, barely raises its own threshold.
"""

from __future__ import annotations

import functools
from collections import deque

import numpy as np
from scipy import special, stats

KOLMOGOROV_MEDIAN = float(special.kolmogi(0.5))
MIN_HISTORY = 30   # quiet ticks (5 min at 10 s) before the scale is measured and length tests may fire
REFRESH_EVERY = 6  # new ratios before the quantile is recomputed
PSI_DF = 10        # typical degrees of freedom of the octave-bin PSI (8-14 occupied bins)


def ks_ratio(d: float, n: int, m: int) -> float:
    return d / (KOLMOGOROV_MEDIAN * float(np.sqrt((n + m) / (n * m))))


@functools.cache
def _chi2_median(df: int) -> float:
    return float(special.chdtri(df, 0.5))


def psi_ratio(index: float, n: int, m: int, df: int) -> float:
    return index * n * m / (n + m) / _chi2_median(max(df, 1))


def z_pvalue(z: float, phi: float) -> float:
    """Two-sided normal p-value of a z statistic whose spread is phi times the independent one."""
    return float(2 * special.ndtr(-abs(z) / phi))


def ks_pvalue(d: float, n: int, m: int, phi: float) -> float:
    """Asymptotic two-sample KS p-value with effective sizes n / phi^2 and m / phi^2 (phi = inf: 1)."""
    if not np.isfinite(phi):
        return 1.0
    ne, me = n / phi**2, m / phi**2
    return float(special.kolmogorov(d * np.sqrt(ne * me / (ne + me))))


def psi_pvalue(index: float, n: int, m: int, df: int, phi: float) -> float:
    """PSI as a chi-square statistic with effective sizes n / phi^2 and m / phi^2 (phi = inf: 1)."""
    if not np.isfinite(phi):
        return 1.0
    return float(special.chdtrc(max(df, 1), index * n * m / (n + m) / phi**2))


class DesignEffect:
    """Running phi of one statistic from the ratios of quiet ticks."""

    def __init__(self, history: int, default: float, cap: float, quantile: float, iid_quantile: float,
                 squared: bool) -> None:
        self.ratios: deque[float] = deque(maxlen=history)
        self.default = default
        self.cap = cap
        self.quantile = quantile
        self.iid_quantile = iid_quantile  # the same quantile of the ratio for independent samples
        self.squared = squared  # PSI ratios scale with phi^2, KS ones with phi

        self._phi = default
        self._stale = 0

    def add(self, ratio: float) -> None:
        self.ratios.append(ratio)
        self._stale += 1

    @property
    def measured(self) -> bool:
        return len(self.ratios) >= MIN_HISTORY

    @property
    def phi(self) -> float:
        if len(self.ratios) < MIN_HISTORY:
            return self.default
        if self._stale >= REFRESH_EVERY or self._phi == self.default:  # a quantile per tick is wasted work
            scale = float(np.quantile(self.ratios, self.quantile)) / self.iid_quantile
            self._phi = float(np.clip(np.sqrt(scale) if self.squared else scale, 1.0, self.cap))
            self._stale = 0
        return self._phi


def ks_effect(history: int, default: float, cap: float, quantile: float) -> DesignEffect:
    iid = float(special.kolmogi(1 - quantile)) / KOLMOGOROV_MEDIAN
    return DesignEffect(history, default, cap, quantile, iid, squared=False)


def z_effect(history: int, default: float, cap: float, quantile: float) -> DesignEffect:
    """Design effect of the location test's |z| (difference of mean log lengths, checks.py)."""
    iid = float(special.ndtri(0.5 + quantile / 2))
    return DesignEffect(history, default, cap, quantile, iid, squared=False)


def psi_effect(history: int, default: float, cap: float, quantile: float) -> DesignEffect:
    iid = float(stats.chi2.ppf(quantile, PSI_DF) / stats.chi2.median(PSI_DF))
    return DesignEffect(history, default, cap, quantile, iid, squared=True)
