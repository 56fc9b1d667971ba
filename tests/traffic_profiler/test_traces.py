"""Acceptance on the shared real traces (skipped with a clear message when ../shared/traces is absent)."""

from __future__ import annotations

from pathlib import Path

from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.detector import DriftDetector
from services.traffic_profiler.offline import profile_trace
from services.traffic_profiler.readers import read_trace
from services.traffic_profiler.synthetic import SHIFTS, block_bootstrap, decorate


def test_mooncake_phase_change_is_reported_within_60s(traces_dir: Path) -> None:
    result = profile_trace(traces_dir / "mooncake_synthetic_trace.jsonl", record_ticks=False)
    # the phase change: short prompts vanish and outputs collapse at about 630 s of trace time
    events = [d for d in result.drifts if 630 <= d.t_s <= 690]
    moved = {c.metric for d in events for c in d.changes}
    assert {"prompt_tokens", "prefix_hit_rate"} <= moved, [(d.t_s, [c.metric for c in d.changes]) for d in events]
    prompt = next(c for d in events for c in d.changes if c.metric == "prompt_tokens")
    assert prompt.after > 2 * prompt.before
    assert result.overall is not None and result.overall.prefix_hit_rate is not None
    # the simulated cache starts empty: its warm-up (hit rate 0.05 -> 0.4 in the first minutes) is not drift
    assert not [c for c in result.changes() if c["t_s"] < 600], result.changes()


def test_azure_code_reports_the_rate_change_and_no_length_drift(traces_dir: Path) -> None:
    result = profile_trace(traces_dir / "azure2023_code.csv", record_ticks=False)
    metrics = [c["metric"] for c in result.changes()]
    assert "prompt_tokens" not in metrics
    assert "arrival_rate" in metrics


def test_azure_conv_localized_length_drift_is_reported(traces_dir: Path) -> None:
    result = profile_trace(traces_dir / "azure2023_conv.csv", record_ticks=False)
    # minutes 28-38: median prompt about 1040 -> 440 tokens, outputs about halved; the prompt mix starts
    # to change shape about a minute earlier (CUSUM since ~1590 s), which the detector may report first
    shorter = [c for c in result.changes() if c["metric"] == "prompt_tokens" and 1620 <= c["t_s"] <= 2300
               and c["after"] < c["before"]]
    assert shorter, result.changes()


def test_injected_shifts_are_detected_within_2_minutes(traces_dir: Path) -> None:
    source = list(read_trace(traces_dir / "azure2023_conv.csv"))
    stationary = block_bootstrap(source, 1500, seed=0, start_s=0, end_s=1260)
    for shift in SHIFTS:
        detector = DriftDetector(DetectorConfig())
        drifts = [d for r in decorate(stationary, shift.before, shift.after, 900, seed=0) for d in detector.observe(r)]
        assert not [d for d in drifts if d.t_s < 900], f"{shift.name}: alarm before the shift"
        hits = [d for d in drifts if {c.metric for c in d.changes} & set(shift.metrics)]
        assert hits and hits[0].t_s <= 900 + 120, f"{shift.name}: {[(d.t_s, d.changes) for d in drifts]}"
        if "tag_mix" in shift.metrics:  # with tags, the event names the mix that moved
            assert "tag_mix" in {c.metric for c in hits[0].changes}, hits[0].changes
