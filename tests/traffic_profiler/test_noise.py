"""The location estimators and the wander model the prompt location test rests on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.traffic_profiler.location import ESTIMATORS, locations, unit_variances
from services.traffic_profiler.noise import WanderEffect


def test_a_growth_by_a_factor_moves_every_location_by_its_log() -> None:
    rng = np.random.default_rng(0)
    prompts = np.sort(rng.lognormal(7.0, 1.3, 20_000).astype(np.int64) + 1)
    grown = np.sort(np.round(prompts * 1.8).astype(np.int64))
    for before, after in zip(locations(prompts), locations(grown), strict=True):
        assert after - before == pytest.approx(math.log(1.8), abs=0.01)


def test_unit_variance_matches_the_spread_over_independent_samples() -> None:
    rng = np.random.default_rng(1)
    population = rng.lognormal(7.0, 1.3, 200_000).astype(np.int64) + 1
    n = 200
    draws = np.array([locations(np.sort(rng.choice(population, n))) for _ in range(2000)])
    predicted = np.array(unit_variances(np.sort(population))) / n
    assert draws.shape[1] == len(ESTIMATORS)
    np.testing.assert_allclose(draws.var(axis=0), predicted, rtol=0.2)


def test_ties_never_claim_zero_variance() -> None:
    assert min(unit_variances(np.full(500, 128))) > 0


def quiet_ticks(effect: WanderEffect, tau: float, ticks: int, seed: int = 0) -> None:
    """Shifts of independent windows whose mix wanders by tau on top of sampling noise."""
    rng = np.random.default_rng(seed)
    for _ in range(ticks):
        variance = rng.uniform(0.002, 0.05)   # quiet minutes sample little, busy ones much
        wander = 1.1
        effect.add(rng.normal(0.0, math.sqrt(variance + tau * tau * wander)), variance, wander)


def test_wander_recovers_the_between_window_variance() -> None:
    effect = WanderEffect(history=2000, hold=0)
    quiet_ticks(effect, tau=0.15, ticks=2000)
    assert effect.measured
    assert math.sqrt(effect.tau2) == pytest.approx(0.15, rel=0.15)


def test_independent_windows_measure_no_wander() -> None:
    effect = WanderEffect(history=2000, hold=0)
    quiet_ticks(effect, tau=0.0, ticks=2000)
    assert effect.tau2 < 0.002


def test_wander_is_unmeasured_until_enough_ticks_left_the_hold() -> None:
    effect = WanderEffect(history=360, hold=12)
    assert effect.tau2 == math.inf  # the test cannot fire on a guess
    quiet_ticks(effect, tau=0.1, ticks=12 + 29)
    assert not effect.measured and effect.tau2 == math.inf
    quiet_ticks(effect, tau=0.1, ticks=1)
    assert effect.measured and math.isfinite(effect.tau2)


def test_ticks_still_on_hold_are_dropped_when_their_metric_fires() -> None:
    effect = WanderEffect(history=360, hold=12)
    quiet_ticks(effect, tau=0.1, ticks=40)
    before = len(effect.history)
    effect.discard_pending()  # they may hold the start of the change that fired
    quiet_ticks(effect, tau=0.1, ticks=12)
    assert len(effect.history) == before


def test_one_burst_moves_the_wander_little() -> None:
    # clipped |z|: a burst among quiet ticks counts as one big tick, not as its square
    quiet, bursty = WanderEffect(history=400, hold=0), WanderEffect(history=400, hold=0)
    quiet_ticks(quiet, tau=0.1, ticks=400)
    quiet_ticks(bursty, tau=0.1, ticks=390)
    for _ in range(10):
        bursty.add(3.0, 0.01, 1.1)  # a 20x jump, thirty times the wander
    assert bursty.tau2 < 1.3 * quiet.tau2
