"""`polymorph profile`: one JSON object, a table, a PNG with change points; bad files handled."""

from __future__ import annotations

import json
from pathlib import Path

from services.traffic_profiler.report import profile_command


def test_json_and_plot_on_mooncake(traces_dir: Path, tmp_path: Path, capsys) -> None:
    plot = tmp_path / "plots" / "mooncake.png"
    assert profile_command(traces_dir / "mooncake_synthetic_trace.jsonl", json_out=True, plot=plot) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # exactly one JSON object on stdout
    assert report["records"] == 3993 and report["malformed"] == 0
    assert report["changes"], "mooncake's phase change must be listed"
    for change in report["changes"]:
        assert {"t_s", "metric", "before", "after"} <= set(change)
        assert 0 <= change["t_s"] <= 1030
    assert {"prompt_tokens", "prefix_hit_rate"} <= {c["metric"] for c in report["changes"]}
    assert report["drifts"][0]["buckets"] and report["windows"]
    assert report["profile"]["prompt"]["p50"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_output_and_malformed_lines(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "small.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:{m:02d}:{s:02d}.0,{100 + s},{10 + m}" for m in range(0, 8) for s in range(0, 60, 2)]
    rows.insert(5, "garbage,line")
    trace.write_text("\n".join(rows) + "\n")
    assert profile_command(trace, json_out=False, plot=None) == 0
    text = capsys.readouterr().out
    assert "detected changes" in text or "no drift detected" in text
    assert "1 malformed" in text
    assert profile_command(trace, json_out=True, plot=None) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["malformed"] == 1 and "small.csv:6" in report["errors"][0]


def test_unreadable_trace_returns_2(tmp_path: Path, capsys) -> None:
    assert profile_command(tmp_path / "missing.csv", json_out=True, plot=None) == 2
    assert capsys.readouterr().out == ""


def test_windows_describe_time_that_passed_and_idle_minutes_have_no_lengths(tmp_path: Path, capsys) -> None:
    # a record at trace time 0 and a silent minute: the first window must not claim a rate of one
    # record per nanosecond, and the silent one must not claim prompts of length 0
    trace = tmp_path / "gap.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:00:{s:02d}.0,{500 + s},20" for s in range(0, 60, 2)]
    rows += [f"2023-11-16 18:03:{s:02d}.0,{500 + s},20" for s in range(0, 60, 2)]
    trace.write_text("\n".join(rows) + "\n")
    assert profile_command(trace, json_out=True, plot=tmp_path / "gap.png") == 0
    windows = json.loads(capsys.readouterr().out)["windows"]
    assert windows[0]["t_s"] > 0
    assert all(w["arrival_rate"] <= 1.0 for w in windows)  # 0.5 requests/s at most, by construction
    idle = [w for w in windows if w["requests"] == 0]
    assert idle and all(w["prompt_p50"] is None and w["output_p90"] is None for w in idle)
    busy = [w for w in windows if w["requests"] > 0]
    assert all(w["prompt_p50"] >= 500 for w in busy)
