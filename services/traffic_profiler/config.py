"""Profiler settings from POLYMORPH_TRAFFIC_PROFILER_* variables (see `ProfilerConfig.from_env`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.config import CommonSettings, Env

P = "TRAFFIC_PROFILER_"


@dataclass(frozen=True)
class DetectorConfig:
    """Windowing and drift thresholds; shared by the live service and `polymorph profile`."""

    window_s: float = 60.0          # current window: records with arrival in (t - window_s, t]
    mid_window_s: float = 120.0     # a second window: on resampled azure code a 1.8x prompt growth has a
    #                                 median z of 5.3 in it, 4.1 in the short one (0: off) ...
    long_window_s: float = 300.0    # ... and a third, for smaller sustained shifts (0: off)
    step_s: float = 10.0            # evaluate every step_s of trace time (ticks at multiples of it)
    reference_s: float = 900.0      # the reference grows (while quiet) up to this much traffic (15 min: a
    #                                 few minutes of bursty traffic are too noisy a baseline for location)
    min_records: int = 30           # fewer records in a window: distributions are not compared
    persistence: int = 3            # consecutive ticks over threshold before firing
    cooldown_s: float = 120.0       # no new event for this long after one; then the reference re-bases
    ks_min: float = 0.15            # KS distance a length distribution must move by ...
    psi_min: float = 0.1            # ... and its population stability index ...
    p_max: float = 1e-8             # ... with a burst-adjusted p-value (KS or PSI) below this (noise.py)
    p_moved: float = 1e-5           # a metric this significant is listed in an event it did not fire
    loc_ratio_min: float = 1.25     # location test: upper-half locations must differ by this factor ...
    loc_p_max: float = 7e-5         # ... with a burst-adjusted p-value below this (0: test off; at 1e-4
    #                                 resampled code alarmed 1.1 times per 10 h, benchmarks/drift_eval.py)
    loc_p_moved: float = 3e-3       # ... or this, to be listed in an event another metric fired
    phi_default: float = 1.5        # design effect before it is measured (length tests wait for it: noise.py)
    phi_max: float = 4.0
    phi_history_ticks: int = 360    # quiet ticks whose KS ratios give the measured design effect
    noise_hold_s: float = 120.0     # a quiet tick joins the location wander history this much later
    phi_quantile: float = 0.5       # ... read off this quantile of their ratios (noise.py)
    rate_window_s: float = 600.0    # arrival rate is compared over this longer window (bursty traffic)
    rate_reference_s: float = 1800.0  # ... against a reference of up to this much traffic (30 min: minutes
    #                                  of idle or burst in a bursty trace must not make the baseline)
    rate_ratio_min: float = 3.0     # rate change factor that counts as drift (either direction) ...
    rate_p_max: float = 0.05        # ... if also significant against per-minute variability (checks.py)
    rate_persistence_s: float = 240.0  # ... and sustained this long (minutes of bursts are not drift: at
    #                                   120 s the code trace's busy stretches alarmed once per 10 h)
    hit_delta_min: float = 0.1      # absolute change of the prefix-cache token hit rate ...
    hit_p_max: float = 1e-5         # ... with a burst-adjusted p-value below this (checks.py; at 1e-4
    #                                 a few huge prompts of resampled code traffic alarmed once per 60 h)
    hit_p_moved: float = 1e-2       # ... or this, to be listed in an event another metric fired
    expert_psi_min: float = 0.05    # PSI of the per-expert token shares
    tag_psi_min: float = 0.25       # PSI of the tag (region, tenant) mix
    cache_blocks: int = 1_000_000   # simulated prefix-cache capacity (LRU blocks), 0 = unbounded
    cache_warmup_s: float = 360.0   # a simulated cache is cold for at least this much trace time, and
    #                                 until its hit rate's own trend flattens (detector.py, "warm-up"); 0: off
    block_tokens: int = 512         # tokens per prompt block hash
    decode_tps: float = 40.0        # assumed decode speed per request (tokens/s), for Little's law
    prefill_tps: float = 8000.0     # assumed prefill throughput (tokens/s), for Little's law
    max_batch: int = 256            # decode batch size cap for shape buckets
    reorder_s: float = 60.0         # records are put back in arrival order over this much trace time
    #                                 before they count (a pipeline publishes a request when it ends, so
    #                                 arrivals come out of order by up to a request's latency)
    max_lateness_s: float = 900.0   # records this far behind the newest, `rewind_records` in a row, are a
    rewind_records: int = 50        # trace replayed again: a new epoch. Fewer are late records: counted,
    #                                 reported, dropped (the windows they belong to were evaluated)

    @classmethod
    def from_env(cls, env: Env) -> DetectorConfig:
        d = cls()
        values: dict[str, Any] = {}  # each field's type is its default's: int or float
        for name in cls.__dataclass_fields__:
            default = getattr(d, name)
            reader = env.int if isinstance(default, int) else env.float
            values[name] = reader(P + name.upper(), default)
        return cls(**values)


@dataclass(frozen=True)
class ProfilerConfig:
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    state_dir: Path = Path(".polymorph/traffic_profiler")
    snapshot_every_s: float = 2.0   # wall seconds between detector-state snapshots
    model: str = "llama-tiny"

    @classmethod
    def from_env(cls, env: Env, common: CommonSettings | None = None) -> ProfilerConfig:
        common = common or CommonSettings.from_env(env)
        return cls(
            detector=DetectorConfig.from_env(env),
            state_dir=env.path(P + "STATE_DIR", common.data_dir / "traffic_profiler"),
            snapshot_every_s=env.float(P + "SNAPSHOT_EVERY_S", 2.0),
            model=common.model,
        )
