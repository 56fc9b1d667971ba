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
    out_of_order: int = 0  # records the file held out of time order (sorted before profiling)
    late: int = 0          # records behind the reordering window (a file read line by line): dropped
    reordered: int = 0     # records put back in order within the reordering window
    rewinds: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
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


MAX_PLAUSIBLE_RATE = 5_000.0  # requests/s: more, over a whole trace, is timestamps in a smaller unit than said
MAX_PLAUSIBLE_SPAN_S = 60 * 86_400.0  # 60 days: longer is timestamps in a larger unit than said


def plausibility(records: int, span_s: float, mapping: ColumnMapping | None) -> list[str]:
    """Warnings for arrival times whose unit looks wrong (the trace's rate or span is implausible)."""
    unit = mapping.arrival_unit if mapping else "s"
    if records >= 1000 and span_s > 0 and records / span_s > MAX_PLAUSIBLE_RATE:
        return [f"{records} records in {span_s:.3g} s of arrival time ({records / span_s:,.0f} requests/s): are "
                f"the arrival times in a larger unit than {unit!r}? (--columns arrival=COL:UNIT)"]
    if span_s > MAX_PLAUSIBLE_SPAN_S:
        return [f"arrival times span {span_s / 86_400:,.0f} days: are they in a smaller unit than {unit!r}, "
                "such as ms? (--columns arrival=COL:UNIT)"]
    return []


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
    result.out_of_order, result.late, result.reordered = reader.out_of_order, detector.late, detector.reordered
    result.rewinds = detector.rewinds
    result.warnings = plausibility(result.records, detector.newest or 0.0, reader.mapping)
    if result.out_of_order:
        result.warnings.append(f"{result.out_of_order} records were out of time order in the file; sorted by "
                               "arrival before profiling")
    if result.late:
        result.warnings.append(f"{result.late} records arrived more than {config.reorder_s:.0f} s behind newer "
                               "ones and were dropped (the file is not time-sorted; sort it by arrival)")
    result.ticks = detector.ticks
    if overall and len(everything):
        whole = everything.window(-1e-9, detector.latest or 0.0)
        result.overall = build_profile(whole, config)
    return result
