"""Profile a trace file offline with the same detector the live service runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.detector import Drift, DriftDetector, Tick
from services.traffic_profiler.profile import Profile, build_profile
from services.traffic_profiler.readers import ColumnMapping, read_trace
from services.traffic_profiler.window import RowStore


@dataclass
class TraceProfile:
    path: Path
    config: DetectorConfig
    records: int = 0
    malformed: int = 0
    errors: list[str] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)
    overall: Profile | None = None
    seconds: float = 0.0

    def changes(self) -> list[dict]:
        """One row per reported metric change, in trace order."""
        return [
            {"t_s": d.t_s, "metric": c.metric, "before": c.before, "after": c.after, "ks": c.ks, "psi": c.psi,
             "since_s": c.since_s, "drift_id": d.drift_id}
            for d in self.drifts for c in d.changes
        ]


def profile_trace(path: Path, config: DetectorConfig | None = None, *, mapping: ColumnMapping | None = None,
                  record_ticks: bool = True, overall: bool = True) -> TraceProfile:
    config = config or DetectorConfig()
    reader = read_trace(Path(path), mapping)
    detector = DriftDetector(config, record_ticks=record_ticks)
    everything = RowStore()
    if overall:
        detector.on_release = lambda r, hit: everything.append(r.arrival_s, r.prompt_tokens, r.output_tokens, hit,
                                                                r.tag, r.expert_counts)
    result = TraceProfile(Path(path), config)
    start = time.perf_counter()
    for record in reader:
        result.drifts.extend(detector.observe(record))
    result.drifts.extend(detector.flush())
    result.seconds = time.perf_counter() - start
    result.records, result.malformed, result.errors = reader.records, reader.malformed, reader.errors
    result.ticks = detector.ticks
    if overall and len(everything):
        whole = everything.window(-1e-9, detector.latest or 0.0)
        result.overall = build_profile(whole, config)
    return result
