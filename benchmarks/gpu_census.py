"""Who holds the GPU's memory while the stack runs: nvidia-smi's per-process figures, sampled in a
thread, each process named by its place in the stack (a service, a tier's harness, one of the
harness's sandboxes), the peak per name and the total over time kept for the results file."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def used_by_pid() -> dict[int, int]:
    """MiB of device memory per process, as nvidia-smi reports it (empty without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=False, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(p): int(m) for p, m in (line.split(",") for line in out.splitlines() if line.count(",") == 1)
            if p.strip().isdigit() and m.strip().isdigit()}


def parent_of(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past a name with spaces


class GpuCensus:
    """`names()` maps a pid to what it is (called each sample: new sandboxes come and go)."""

    def __init__(self, names: Callable[[], dict[int, str]], every_s: float = 3.0) -> None:
        self.names, self.every_s = names, every_s
        self.peak_by_role: dict[str, int] = {}
        self.timeline: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-census")

    def __enter__(self) -> GpuCensus:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def role(self, pid: int, known: dict[int, str]) -> str:
        chain: list[str] = []
        p = pid
        for _ in range(6):
            if p in known:
                return known[p] + "".join(f">{c}" for c in reversed(chain))
            chain.append("child")
            p = parent_of(p)
            if p <= 1:
                break
        return f"other:{pid}"

    def sample(self) -> None:
        used = used_by_pid()
        known = self.names()
        by_role: dict[str, int] = {}
        for pid, mib in used.items():
            role = self.role(pid, known)
            by_role[role] = by_role.get(role, 0) + mib
            self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), mib)
        self.timeline.append({"t_s": round(time.perf_counter() - self._t0, 1), "total_mib": sum(used.values()),
                              "processes": len(used), "by_role": by_role})

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def report(self) -> dict[str, Any]:
        peak = max(self.timeline, key=lambda r: r["total_mib"], default={})
        return {"peak_total_mib": peak.get("total_mib", 0), "at_peak": peak.get("by_role", {}),
                "peak_by_role_mib": self.peak_by_role, "timeline": self.timeline[::max(1, len(self.timeline) // 60)]}


def harness_pids(engine_log: Path) -> dict[int, str]:
    """Tier harness pids from the engine host's 'harness started' log lines."""
    out: dict[int, str] = {}
    try:
        lines = engine_log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if '"harness started"' not in line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short while the service writes it
        if rec.get("pid"):
            out[int(rec["pid"])] = f"engine_host.{rec.get('tier', '?')}_harness"
    return out
