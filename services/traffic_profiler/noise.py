"""How much a window's traffic wanders on its own: design effects and between-window wander.

Real traffic is bursty: one user's burst brings many near-identical requests, so a window holds
fewer independent samples than requests, and plain tests flag bursts as drift. The detector keeps,
per metric, window size and statistic, the ratios of the statistic on quiet ticks to what
independent samples of the same sizes would give:

    KS:  r = D / median KS distance of independent samples     (Kolmogorov law, scipy.special)
    PSI: r = PSI * n_h / median of chi2(df)                    (n_h = n m / (n + m); PSI ~ chi2 / n_h)

Their scale phi^2 (about 1 for independent requests, larger for clustered ones) makes each test
cluster-robust: the KS p-value uses effective sample sizes n / phi^2, the PSI one the statistic
PSI * n_h / phi^2 against chi2(df). A drift has to stand out from the traffic's usual
window-to-window wander, whatever its burstiness. The hit-rate test is treated the same way: z / phi
against the normal law, phi from its quiet |z| values. The scale is read off a quantile
(phi_quantile) of the ratios (divided by the same quartile for independent samples), so a slow drift
that has not fired yet, which inflates the upper ratios, barely raises its own threshold.

The prompt location test (location.py) needs a second level instead: a window's mix of prompts
wanders by about the same amount whether it holds 50 requests or 500, so that wander adds to the
sampling variance rather than multiplying it (`WanderEffect`). A design effect measured on a trace's
busy minutes would otherwise swamp a quiet minute's real shift, and one measured on quiet minutes
would let a busy minute's wander through.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from services.traffic_profiler.location import ESTIMATORS, Location

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
    """Design effect of a |z| statistic (the hit-rate shift, checks.py)."""
    iid = float(special.ndtri(0.5 + quantile / 2))
    return DesignEffect(history, default, cap, quantile, iid, squared=False)


def psi_effect(history: int, default: float, cap: float, quantile: float) -> DesignEffect:
    iid = float(stats.chi2.ppf(quantile, PSI_DF) / stats.chi2.median(PSI_DF))
    return DesignEffect(history, default, cap, quantile, iid, squared=True)


# tau^2 is calibrated on |z| clipped at Z_CLIP: for normal z it comes out with 2.1 times less variance
# than from the median of z^2 (simulated, 40 and 200 ticks: the same precision from half the quiet
# minutes), while one burst among n quiet ticks still moves the calibration by at most Z_CLIP / n
# (clipped at 3, mooncake's heavy-tailed decile wander delayed its phase change by 30 s)
Z_CLIP = 2.0
CLIPPED_ABS_MEAN = float(math.sqrt(2 / math.pi) * (1 - math.exp(-Z_CLIP**2 / 2)) + 2 * Z_CLIP * special.ndtr(-Z_CLIP))


class WanderEffect:
    """Between-window variance tau^2 of a location shift d (current - reference).

    var(d) = v + tau^2 c: v is d's variance for independent requests, c = 1 + window / reference
    duration (both windows wander, the reference less the longer it is). tau^2 solves
    mean(min(|d| / sqrt(v + tau^2 c), Z_CLIP)) = E min(|Z|, Z_CLIP) over the quiet ticks, Z standard
    normal (`calibrate_tau2`). A tick joins that history only `hold` ticks later, and not at all when
    its metric fired meanwhile, so a shift that has not fired yet cannot inflate its own threshold in
    its first minutes.
    """

    def __init__(self, history: int, hold: int) -> None:
        self.history: deque[tuple[float, float, float]] = deque(maxlen=history)
        self.pending: deque[tuple[float, float, float]] = deque()
        self.hold = hold
        self._tau2 = math.inf
        self._stale = REFRESH_EVERY

    def add(self, shift: float, variance: float, wander: float) -> None:
        self.pending.append((shift * shift, variance, wander))
        while len(self.pending) > self.hold:
            self.history.append(self.pending.popleft())
            self._stale += 1

    def discard_pending(self) -> None:
        self.pending.clear()

    @property
    def measured(self) -> bool:
        return len(self.history) >= MIN_HISTORY

    @property
    def tau2(self) -> float:
        """inf until measured: the test must not fire on a guess of this traffic's wander."""
        if not self.measured:
            return math.inf
        if self._stale >= REFRESH_EVERY:
            d2, v, c = (np.array(column) for column in zip(*self.history, strict=True))
            self._tau2 = calibrate_tau2(d2, v, c)
            self._stale = 0
        return self._tau2


def calibrate_tau2(d2: np.ndarray, v: np.ndarray, c: np.ndarray) -> float:
    """The tau^2 >= 0 at which the clipped |z| = |d| / sqrt(v + tau^2 c) average CLIPPED_ABS_MEAN
    (the average falls as tau^2 grows: one root, found by Brent's method)."""
    def excess(tau2: float) -> float:
        return float(np.mean(np.minimum(np.sqrt(d2 / np.maximum(v + tau2 * c, 1e-12)), Z_CLIP))) - CLIPPED_ABS_MEAN
    if excess(0.0) <= 0:
        return 0.0
    hi = float(d2.max() / c.min())  # every |z| <= 1 there: past the root unless all ticks sit at the max
    return hi if excess(hi) > 0 else float(optimize.brentq(excess, 0.0, hi, xtol=1e-12))


@dataclass(frozen=True)
class Levels:
    """The noise levels one check runs against (inf: not measured yet, the test cannot fire)."""

    ks_phi: float = 1.0
    psi_phi: float = 1.0
    hit_phi: float = 1.0
    location_tau2: tuple[float, ...] = (0.0,) * len(ESTIMATORS)  # per location estimator


@dataclass
class Noise:
    """What the quiet ticks of one metric at one window size taught about the traffic's wander."""

    ks: DesignEffect
    psi: DesignEffect
    hit: DesignEffect
    location: tuple[WanderEffect, ...]  # per location estimator (location.ESTIMATORS)

    @classmethod
    def create(cls, history: int, default: float, cap: float, quantile: float, hold: int) -> Noise:
        return cls(ks_effect(history, default, cap, quantile), psi_effect(history, default, cap, quantile),
                   z_effect(history, default, cap, quantile),
                   tuple(WanderEffect(history, hold) for _ in ESTIMATORS))

    def add_quiet(self, locations: tuple[Location, ...], wander: float) -> None:
        for effect, loc in zip(self.location, locations, strict=True):
            effect.add(loc.shift, loc.variance, wander)

    def discard_pending(self) -> None:
        for effect in self.location:
            effect.discard_pending()

    def levels(self, metric: str) -> Levels:
        # a length test waits until its noise is measured: a default cannot know how bursty this
        # traffic is, and an alarm in the first minutes would rest on a guess (the hit rate's shift is
        # its own effect size and a cache warms late: it starts on the default)
        def phi(e: DesignEffect) -> float:
            return e.phi if e.measured or metric == "prefix_hit_rate" else math.inf
        return Levels(phi(self.ks), phi(self.psi), phi(self.hit), tuple(e.tau2 for e in self.location))
