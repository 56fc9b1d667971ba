"""The `polymorph` command as a person runs it: a subprocess, its exit code and what it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def polymorph(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_help_lists_every_command() -> None:
    out = polymorph("--help")
    assert out.returncode == 0
    for command in ("up", "demo", "optimize", "status", "sql", "export", "replay", "profile", "credentials"):
        assert command in out.stdout


def test_sql_without_a_stack_says_so(tmp_path: Path) -> None:
    out = polymorph("--data-dir", str(tmp_path), "--nats", "nats://127.0.0.1:1", "sql", "select 1")
    assert out.returncode == 2
    assert "cannot reach NATS" in out.stderr


def test_replay_without_a_stack_or_a_file_says_so_and_stops(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n")
    # nothing listens on port 1: one clear line and exit 2, not retries forever (the services' way)
    out = polymorph("--nats", "nats://127.0.0.1:1", "replay", str(trace), timeout=30)
    assert out.returncode == 2
    assert "cannot reach NATS" in out.stderr and "Traceback" not in out.stderr
    missing = polymorph("--nats", "nats://127.0.0.1:1", "replay", str(tmp_path / "nope.csv"), timeout=30)
    assert missing.returncode == 2
    assert "no trace file" in missing.stderr and "Traceback" not in missing.stderr


def test_profile_json_reports_the_mooncake_phase_change(traces_dir: Path, tmp_path: Path) -> None:
    plot = tmp_path / "mooncake.png"
    out = polymorph("profile", str(traces_dir / "mooncake_synthetic_trace.jsonl"), "--json", "--plot", str(plot))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    prompt_changes = [c for c in report["changes"] if c["metric"] == "prompt_tokens"]
    assert prompt_changes, report["changes"]
    first = prompt_changes[0]
    assert set(first) >= {"t_s", "metric", "before", "after"}
    assert 600 <= first["t_s"] <= 700 and first["after"] > 2 * first["before"]
    assert plot.stat().st_size > 10_000  # a real PNG was drawn


def test_profile_of_a_missing_file_fails_cleanly(tmp_path: Path) -> None:
    out = polymorph("profile", str(tmp_path / "nope.csv"))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
