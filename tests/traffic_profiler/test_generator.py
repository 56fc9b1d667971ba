"""The multi-tenant generator: its model shows in the traffic, injected changes show, no-change stays put."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from services.traffic_profiler.checks import METRICS
from services.traffic_profiler.generator import (
    KINDS,
    MIN_GAP_S,
    GeneratorConfig,
    InjectedChange,
    TenantModel,
    generate,
    quiet_stretches,
    tenants,
    write_jsonl,
)
from services.traffic_profiler.readers import read_trace
from services.traffic_profiler.scenarios import main, make_scenario

HOUR = 3600.0


def config(hours: float, rate: float = 5.0, **model: object) -> GeneratorConfig:
    return replace(GeneratorConfig(rate_rps=rate, duration_s=hours * HOUR, seed=7), **model)  # type: ignore[arg-type]


def between(trace, lo: float, hi: float) -> np.ndarray:
    return (trace.arrival_s >= lo) & (trace.arrival_s < hi)


def test_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    cfg = config(0.5)
    a, b, c = generate(cfg), generate(cfg), generate(replace(cfg, seed=8))
    for column in ("arrival_s", "prompt_tokens", "output_tokens", "cached_tokens", "client"):
        assert np.array_equal(getattr(a, column), getattr(b, column))
    assert len(a) != len(c) or not np.array_equal(a.prompt_tokens, c.prompt_tokens)
    assert make_scenario(5, 12, 4, seed=3) == make_scenario(5, 12, 4, seed=3)
    assert make_scenario(5, 12, 4, seed=3) != make_scenario(5, 12, 4, seed=4)


def test_records_are_sorted_whole_and_in_range() -> None:
    trace = generate(config(1))
    assert np.all(np.diff(trace.arrival_s) >= 0) and trace.arrival_s[0] >= 0 and trace.arrival_s[-1] < HOUR
    assert np.array_equal(np.rint(trace.arrival_s * 1000) / 1000, trace.arrival_s)
    assert trace.prompt_tokens.min() >= 1 and trace.output_tokens.min() >= 1
    assert np.all((trace.cached_tokens >= 0) & (trace.cached_tokens <= trace.prompt_tokens))
    first = next(trace.records())
    assert (first.arrival_s, first.prompt_tokens, first.tag) == (trace.arrival_s[0], trace.prompt_tokens[0],
                                                                 trace.tags()[0])
    assert sum(1 for _ in trace.records()) == len(trace)


def test_a_few_heavy_clients_carry_most_of_the_traffic() -> None:
    clients = tenants(GeneratorConfig())
    rates = np.array([t.rate_rps for t in clients])
    assert len(clients) == 30 and rates.sum() == pytest.approx(10.0)
    assert np.all(np.diff(rates) < 0) and rates[:3].sum() > 0.45 * rates.sum()


@pytest.mark.parametrize("rate", [0.5, 10.0])
def test_mean_total_rate_is_the_requested_one(rate: float) -> None:
    trace = generate(config(3 if rate > 1 else 8, rate=rate))
    assert len(trace) / trace.config.duration_s == pytest.approx(rate, rel=0.1)


def test_arrivals_are_bursty_not_poisson() -> None:
    trace = generate(config(2))
    gaps = np.diff(trace.arrival_s)
    assert gaps.std() / gaps.mean() > 1.2  # Poisson: 1
    heavy = np.diff(trace.arrival_s[trace.client == 0])
    assert heavy.std() / heavy.mean() == pytest.approx(trace.tenants[0].burst_cv, rel=0.25)
    counts = np.bincount((trace.arrival_s // 60).astype(int))
    assert counts.var() / counts.mean() > 2  # minute counts overdispersed (Poisson: 1)


def test_the_diurnal_cycle_has_the_configured_amplitude_and_peak() -> None:
    trace = generate(config(24, rate=1.0, diurnal_amplitude=0.5, diurnal_peak_s=15 * HOUR))
    counts = np.bincount((trace.arrival_s // HOUR).astype(int), minlength=24)
    phase = 2 * np.pi * (np.arange(24) + 0.5) / 24
    design = np.column_stack([np.ones(24), np.cos(phase), np.sin(phase)])
    mean, a, b = np.linalg.lstsq(design, counts, rcond=None)[0]
    assert np.hypot(a, b) / mean == pytest.approx(0.5, abs=0.08)
    assert (np.arctan2(b, a) * 24 / (2 * np.pi)) % 24 == pytest.approx(15.0, abs=1.0)
    assert mean == pytest.approx(HOUR, rel=0.1)


def test_a_prompt_median_change_on_all_clients_doubles_the_median() -> None:
    cfg, t0 = config(3), 1.5 * HOUR
    trace = generate(cfg, [InjectedChange("prompt_p50", t0, 2.0)])
    before = np.median(trace.prompt_tokens[between(trace, t0 - 1800, t0)])
    after = np.median(trace.prompt_tokens[between(trace, t0, t0 + 1800)])
    assert after / before == pytest.approx(2.0, rel=0.15)
    twin = generate(cfg)  # the same arrivals and draws: only the lengths after t0 differ
    assert np.array_equal(twin.arrival_s, trace.arrival_s)
    assert np.array_equal(twin.prompt_tokens[trace.arrival_s < t0], trace.prompt_tokens[trace.arrival_s < t0])
    assert np.array_equal(twin.output_tokens, trace.output_tokens)


def test_without_a_change_medians_half_an_hour_apart_stay_close() -> None:
    trace = generate(config(8))
    half_hour = (trace.arrival_s // 1800).astype(int)
    for column in (trace.prompt_tokens, trace.output_tokens):
        medians = np.array([np.median(column[half_hour == k]) for k in range(16)])
        assert np.all(np.exp(np.abs(np.diff(np.log(medians)))) < 1.3)
        assert medians.max() / medians.min() < 1.6  # the wander is mean-reverting: no sustained drift


def test_a_p90_change_moves_the_tail_not_the_median() -> None:
    t0 = HOUR
    trace = generate(config(2), [InjectedChange("prompt_p90", t0, 2.0, client="client-00")])
    own = trace.client == 0
    before = trace.prompt_tokens[own & (trace.arrival_s < t0)]
    after = trace.prompt_tokens[own & (trace.arrival_s >= t0)]
    assert np.quantile(after, 0.9) / np.quantile(before, 0.9) == pytest.approx(2.0, rel=0.2)
    assert np.median(after) / np.median(before) == pytest.approx(1.0, abs=0.15)


def test_a_rate_change_shows_in_the_counts() -> None:
    cfg, t0 = config(2), HOUR
    trace, twin = generate(cfg, [InjectedChange("rate", t0, 1.5)]), generate(cfg)
    assert np.array_equal(trace.arrival_s[trace.arrival_s < t0], twin.arrival_s[twin.arrival_s < t0])
    after, base = between(trace, t0, 2 * HOUR).sum(), between(twin, t0, 2 * HOUR).sum()
    assert after / base == pytest.approx(1.5, rel=0.1)


def test_a_joining_client_adds_a_tag_and_a_leaving_one_removes_its_own() -> None:
    newcomer = TenantModel("client-99", 2.0, 20_000.0, 0.5, 50.0, 0.5, 0.3, 2.0)
    trace = generate(config(2), [InjectedChange("client_join", 0.5 * HOUR, 0.4, "client-99", newcomer),
                                 InjectedChange("client_leave", HOUR, 0.0, "client-00")])
    tags = trace.tags()
    joined, left = tags == "client-99", tags == "client-00"
    assert trace.arrival_s[joined].min() >= 0.5 * HOUR and joined.sum() == pytest.approx(2.0 * 1.5 * HOUR, rel=0.2)
    assert np.median(trace.prompt_tokens[joined]) == pytest.approx(20_000, rel=0.35)  # give or take the wander
    assert left.sum() > 0 and trace.arrival_s[left].max() < HOUR


def test_a_hit_collapse_lowers_the_cached_share_of_prompts() -> None:
    t0 = HOUR
    trace = generate(config(2), [InjectedChange("hit_collapse", t0, 0.15)])

    def share(rows: np.ndarray) -> float:
        return float(trace.cached_tokens[rows].sum() / trace.prompt_tokens[rows].sum())

    before, after = share(between(trace, 0, t0)), share(between(trace, t0, 2 * HOUR))
    assert before > 0.3 and after == pytest.approx(0.15 * before, rel=0.3)


def test_scenarios_space_their_changes_and_leave_quiet_stretches() -> None:
    scenario = make_scenario(2.0, 48, 12, seed=1)
    starts = np.array([c.start_s for c in scenario.changes])
    assert len(starts) == 12 and np.all(np.diff(starts) >= MIN_GAP_S)
    assert starts[0] >= MIN_GAP_S and starts[-1] <= 47 * HOUR
    assert {c.kind for c in scenario.changes} == set(KINDS)  # shuffled rounds: every kind comes up
    assert all(set(c.metrics) <= set(METRICS) for c in scenario.changes)
    for c in scenario.changes:
        assert c.factor == 0 if c.kind == "client_leave" else (1.3 <= max(c.factor, 1 / c.factor) <= 3.0
                                                                or c.kind in ("hit_collapse", "client_join"))
    quiet = quiet_stretches(scenario.changes, scenario.config.duration_s, guard_s=1800)
    assert all(b > a for a, b in quiet) and sum(b - a for a, b in quiet) > 24 * HOUR
    assert not any(a - 1800 < s < b + 1800 for a, b in quiet for s in starts)
    trace = generate(scenario.config, scenario.changes)
    assert len(trace.tenants) > 30 and 0.6 * 2.0 < len(trace) / (48 * HOUR) < 1.7 * 2.0  # the rate stays near


def test_no_changes_gives_one_quiet_stretch_and_too_many_changes_are_refused() -> None:
    scenario = make_scenario(1.0, 6, 0, seed=0)
    assert scenario.changes == ()
    assert quiet_stretches(scenario.changes, 6 * HOUR) == [(0.0, 6 * HOUR)]
    with pytest.raises(ValueError, match="need more than"):
        make_scenario(1.0, 6, 5, seed=0)


def test_bad_changes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown change kind"):
        InjectedChange("prompt_p99", 0.0, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a client"):
        InjectedChange("client_leave", 0.0, 0.0)
    with pytest.raises(ValueError, match="unknown client"):
        generate(config(0.1), [InjectedChange("rate", 10.0, 2.0, client="nobody")])
    with pytest.raises(ValueError, match="outside the trace"):
        generate(config(0.1), [InjectedChange("rate", HOUR, 2.0)])


def test_the_jsonl_file_reads_back_through_the_profilers_reader(tmp_path: Path) -> None:
    scenario = make_scenario(3.0, 3.5, 1, seed=2)
    trace = generate(scenario.config, scenario.changes)
    path = tmp_path / "trace.jsonl"
    assert write_jsonl(trace, path) == len(trace)
    reader = read_trace(path)
    records = list(reader)
    assert (reader.records, reader.malformed, reader.out_of_order) == (len(trace), 0, 0)
    assert reader.mapping is not None and reader.mapping.cached == "cached_tokens" and reader.mapping.tag == "tag"
    arrival = np.array([r.arrival_s for r in records])
    np.testing.assert_allclose(arrival, trace.arrival_s - trace.arrival_s[0], atol=1e-6)
    assert [r.prompt_tokens for r in records] == trace.prompt_tokens.tolist()
    assert [r.output_tokens for r in records] == trace.output_tokens.tolist()
    assert [r.cached_tokens for r in records] == trace.cached_tokens.tolist()
    assert [r.tag for r in records] == trace.tags().tolist()


def test_the_cli_writes_the_trace_and_its_truth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, truth = tmp_path / "t.jsonl", tmp_path / "truth.json"
    assert main(["--rate", "1", "--hours", "4", "--changes", "1", "--seed", "5", "--out", str(out),
                 "--truth", str(truth)]) == 0
    data = json.loads(truth.read_text())
    assert data["records"] == sum(1 for _ in out.open()) and len(data["changes"]) == 1
    assert data["changes"][0]["metrics"] and data["quiet_stretches"][0][0] == 0.0
    assert 0 <= data["first_arrival_s"] < 60
    assert "generated" in capsys.readouterr().out


def test_an_hour_at_fifty_requests_per_second() -> None:
    trace = generate(config(1, rate=50.0))
    assert len(trace) == pytest.approx(50 * HOUR, rel=0.1)
    assert len(np.unique(trace.client)) == 30
