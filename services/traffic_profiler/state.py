"""Detector snapshots on disk, so a restarted profiler resumes with its windows and reference.

The snapshot names the last stream sequence it includes; records acknowledged after it are read
back from the stream on start (see service.TrafficProfiler._catch_up).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

from services.common.log import get_logger
from services.traffic_profiler.detector import Drift, DriftDetector

log = get_logger("traffic_profiler")
VERSION = 5  # 2: location-test design effects, cache warm-up state; 3: location wander (noise.py);
#             4: a middle window with its own noise levels; 5: the reordering window, late records


@dataclass
class ProfilerState:
    detector: DriftDetector
    last_seq: int = 0                                  # newest traffic.requests sequence observed
    outbox: list[Drift] = field(default_factory=list)  # fired, not yet acknowledged by the stream
    malformed: int = 0
    drifts: int = 0


def save(state: ProfilerState, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump((VERSION, state), fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # atomic: a crash leaves the previous snapshot intact


def load(path: Path) -> ProfilerState | None:
    if not path.exists():
        return None
    try:
        with open(path, "rb") as fh:
            version, state = pickle.load(fh)
    except Exception as exc:  # corrupt or from another version: start fresh, say so
        log.warning("detector snapshot unreadable; starting fresh", path=str(path), error=str(exc))
        return None
    if version != VERSION or not isinstance(state, ProfilerState):
        log.warning("detector snapshot from another version; starting fresh", path=str(path))
        return None
    return state
