"""`python -m services.traffic_profiler` runs alone and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_runs_as_its_own_process(nats_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "POLYMORPH_NATS_URL": nats_url, "POLYMORPH_DATA_DIR": str(tmp_path),
           "POLYMORPH_LOG_LEVEL": "info", "POLYMORPH_TRAFFIC_PROFILER_WINDOW_S": "30"}
    proc = subprocess.Popen([sys.executable, "-m", "services.traffic_profiler"], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "service started" in line or proc.poll() is not None:
                break
        assert any("service started" in line for line in lines), "".join(lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert (tmp_path / "traffic_profiler" / "detector.pkl").exists()  # the final snapshot
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
