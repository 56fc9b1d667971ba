"""Profile → the shapes engines benchmark at: (phase, batch size, context length, weight).

Prefill buckets sit at the prompt-length quantile bands (batch: concurrent prefills, usually 1);
decode buckets at the bands of the mean context a decode step sees (prompt + output / 2), with the
batch size the concurrency estimate. A bucket's weight is its share of the window's estimated GPU
time (prefill: uncached prompt tokens / prefill_tps; decode: output tokens / decode_tps), so the
weights of one profile sum to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.window import WindowData

PREFILL_BANDS = (0.0, 0.25, 0.5, 0.75, 0.95, 1.0)
DECODE_BANDS = (0.0, 0.5, 0.9, 1.0)
CONTEXT_ALIGN = 16
PHASES = {"prefill": ev.PHASE_PREFILL, "decode": ev.PHASE_DECODE}


@dataclass(frozen=True)
class Bucket:
    phase: str
    batch_size: int
    context_len: int
    weight: float

    def to_proto(self) -> ev.ShapeBucket:
        return ev.ShapeBucket(phase=PHASES[self.phase], batch_size=self.batch_size,
                              context_len=self.context_len, weight=self.weight)

    def to_json(self) -> dict:
        return {"phase": self.phase, "batch_size": self.batch_size, "context_len": self.context_len,
                "weight": round(self.weight, 4)}


def _align(tokens: float) -> int:
    return max(CONTEXT_ALIGN, int(np.ceil(tokens / CONTEXT_ALIGN)) * CONTEXT_ALIGN)


def _bands(values: np.ndarray, work: np.ndarray, quantiles: tuple[float, ...]) -> list[tuple[int, float]]:
    """(aligned median of the band, summed work) per quantile band of `values`."""
    edges = np.quantile(values, quantiles[1:-1])
    band = np.searchsorted(edges, values, side="right")
    out = []
    for b in range(len(quantiles) - 1):
        members = band == b
        if members.any():
            out.append((_align(float(np.median(values[members]))), float(work[members].sum())))
    return out


def shape_buckets(w: WindowData, cfg: DetectorConfig, concurrency: float) -> list[Bucket]:
    if w.n == 0:
        return []
    uncached = np.maximum(w.prompt - np.nan_to_num(w.hit), 0.0)
    prefill_s = uncached / cfg.prefill_tps
    decode_s = w.output / cfg.decode_tps
    rate = w.n / w.duration
    prefill_batch = int(np.clip(round(rate * float(prefill_s.mean())), 1, cfg.max_batch))
    decode_batch = int(np.clip(round(concurrency), 1, cfg.max_batch))
    merged: dict[tuple[str, int, int], float] = {}
    for ctx, work in _bands(w.prompt.astype(float), prefill_s, PREFILL_BANDS):
        key = ("prefill", prefill_batch, ctx)
        merged[key] = merged.get(key, 0.0) + work
    for ctx, work in _bands(w.prompt + w.output / 2.0, decode_s, DECODE_BANDS):
        key = ("decode", decode_batch, ctx)
        merged[key] = merged.get(key, 0.0) + work
    total = sum(merged.values())
    if total <= 0:
        return []
    return [Bucket(phase, batch, ctx, work / total) for (phase, batch, ctx), work in merged.items() if work > 0]
