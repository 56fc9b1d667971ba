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
