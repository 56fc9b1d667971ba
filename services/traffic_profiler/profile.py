"""A window's traffic profile: length distributions, rate, burstiness, cache hits, concurrency, experts.

Concurrency is a Little's-law estimate, L = arrival rate x mean service time, with each request's
service time assumed to be  uncached prompt tokens / prefill_tps + output tokens / decode_tps
(DetectorConfig; defaults 8000 and 40 tokens/s). Traces carry no latencies, so this is an
assumption about the serving speed, documented rather than measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.traffic_profiler.buckets import Bucket, shape_buckets
from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.stats import Summary, index_of_dispersion, log_histogram
from services.traffic_profiler.window import WindowData


@dataclass(frozen=True)
class TagStats:
    requests: int
    share: float
    prompt_p50: float
    output_p50: float
    hit_rate: float | None
    prompt: Summary | None = None   # None only in snapshots from before the bus carried tags
    output: Summary | None = None
    arrival_rate: float = 0.0

    def to_proto(self, tag: str) -> ev.TagProfile:
        return ev.TagProfile(
            tag=tag, requests=self.requests, share=self.share, arrival_rate=self.arrival_rate,
            prompt_tokens=_quantiles(self.prompt or Summary(0, self.prompt_p50, 0, 0, 0)),
            output_tokens=_quantiles(self.output or Summary(0, self.output_p50, 0, 0, 0)),
            prefix_hit_rate=-1.0 if self.hit_rate is None else self.hit_rate,
        )


def _quantiles(s: Summary) -> ev.Quantiles:
    return ev.Quantiles(p10=s.p10, p50=s.p50, p90=s.p90, p99=s.p99, mean=s.mean)


@dataclass(frozen=True)
class Profile:
    start: float
    end: float
    requests: int
    prompt: Summary
    output: Summary
    arrival_rate: float
    burstiness: float
    prefix_hit_rate: float | None
    concurrency: float
    expert_load: tuple[float, ...]
    tags: dict[str, TagStats] = field(default_factory=dict)
    prompt_hist: tuple[int, ...] = ()
    output_hist: tuple[int, ...] = ()
    buckets: tuple[Bucket, ...] = ()

    @property
    def expert_imbalance(self) -> float:
        """Largest expert share relative to a perfectly even split (1.0 = balanced); 0 when unknown."""
        return max(self.expert_load) * len(self.expert_load) if self.expert_load else 0.0

    def to_proto(self, profile_id: str, model: str = "") -> ev.TrafficProfile:
        q = _quantiles
        return ev.TrafficProfile(
            profile_id=profile_id,
            window_start_s=self.start,
            window_end_s=self.end,
            requests=self.requests,
            prompt_tokens=q(self.prompt),
            output_tokens=q(self.output),
            arrival_rate=self.arrival_rate,
            burstiness=self.burstiness,
            prefix_hit_rate=-1.0 if self.prefix_hit_rate is None else self.prefix_hit_rate,
            concurrency=self.concurrency,
            expert_load=list(self.expert_load),
            buckets=[b.to_proto() for b in self.buckets],
            model=model,
            tags=[stats.to_proto(tag) for tag, stats in self.tags.items()],
        )

    def to_json(self) -> dict:
        out = asdict(self)
        out["buckets"] = [b.to_json() for b in self.buckets]
        out["expert_imbalance"] = self.expert_imbalance
        return out


def service_times(w: WindowData, cfg: DetectorConfig) -> np.ndarray:
    uncached = w.prompt - np.nan_to_num(w.hit)
    return uncached / cfg.prefill_tps + w.output / cfg.decode_tps


def build_profile(w: WindowData, cfg: DetectorConfig, *, with_buckets: bool = True) -> Profile:
    rate = w.n / w.duration
    concurrency = float(rate * service_times(w, cfg).mean()) if w.n else 0.0
    total_experts = w.experts.sum()
    load = tuple(float(x) for x in w.experts / total_experts) if total_experts > 0 else ()
    return Profile(
        start=w.start,
        end=w.end,
        requests=w.n,
        prompt=Summary.of(w.prompt),
        output=Summary.of(w.output),
        arrival_rate=rate,
        burstiness=index_of_dispersion(w.t, w.start, w.end),
        prefix_hit_rate=w.hit_rate(),
        concurrency=concurrency,
        expert_load=load,
        tags=tag_breakdown(w),
        prompt_hist=tuple(int(c) for c in log_histogram(w.prompt)),
        output_hist=tuple(int(c) for c in log_histogram(w.output)),
        buckets=tuple(shape_buckets(w, cfg, concurrency)) if with_buckets else (),
    )


def tag_breakdown(w: WindowData) -> dict[str, TagStats]:
    if w.n == 0 or not any(w.tags):
        return {}
    out: dict[str, TagStats] = {}
    for tag in sorted(set(w.tags.tolist())):
        mask = w.tags == tag
        sub = w.select(mask)
        prompt, output = Summary.of(sub.prompt), Summary.of(sub.output)
        out[tag or "(none)"] = TagStats(
            requests=sub.n,
            share=sub.n / w.n,
            prompt_p50=prompt.p50,
            output_p50=output.p50,
            hit_rate=sub.hit_rate(),
            prompt=prompt,
            output=output,
            arrival_rate=sub.n / w.duration,
        )
    return out
