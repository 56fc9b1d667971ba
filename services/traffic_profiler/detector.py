"""The drift detector: trace-time windows, per-metric references, persistence, cooldown, re-basing.

Shared by the live service (records from the bus) and `polymorph profile` (records from a file).

Timeline (all in trace time, i.e. the records' arrival_s):
- ticks fall on multiples of step_s; tick T is evaluated once a record later than T arrives (or at
  `flush`), comparing each metric's reference with the current windows (max(T - w, ref.end), T]
  for w in (window_s, mid_window_s, long_window_s) (arrival rate: rate_window_s), so the two never
  overlap; a longer window that the reference cuts short is skipped (it would repeat a shorter
  window's test, against noise measured on whole windows of its length);
- each metric has its own reference (ref.start, ref.end]: it starts with the first records and,
  while that metric is quiet, absorbs the records leaving the middle window (the short one when
  mid_window_s is 0) until it spans reference_s;
- a metric over threshold on `persistence` consecutive ticks, outside its cooldown, fires a Drift
  listing every metric over threshold or notably moved at that tick, with before/after values,
  effect sizes and an estimate of when the change began;
- cooldown_s after firing, each reported metric's reference re-bases onto the traffic since its
  change began (the new regime), so one change is reported once, while the other metrics keep
  comparing with the traffic before; a completed campaign (`request_rebase`) re-bases them all;
- records are released to the windows in arrival order once they are reorder_s behind the newest
  (a bounded reordering window: a serving stack publishes a request when it finishes); a record
  behind what was already released is late: counted (`late`) and dropped, never a reset; only
  rewind_records in a row more than max_lateness_s behind the newest (a trace replayed again) start
  a new epoch, with those records as its first.

Warm-up of a simulated prefix cache (records with block hashes and no cached_tokens): the cache
starts empty, so its hit rate climbs for minutes whatever the traffic does. That is not drift, so
prefix_hit_rate is not compared (its reference stays empty) until the cache is warm: at least
cache_warmup_s of trace time since the first hashed record, AND the hit rate's own trend has
flattened, i.e. the hit rates of the last two window_s windows differ by less than hit_delta_min / 2
(cache_warmup_s = 0 turns the rule off).
Once warm, the reference starts there and the usual rules apply. Reported hit rates (profiles) are
never hidden; only the comparison waits. Hit rates reported by the records themselves need no warm-up.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.traffic_profiler.checks import METRICS, Check, check
from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.noise import Levels, Noise
from services.traffic_profiler.prefix_cache import PrefixCache
from services.traffic_profiler.profile import Profile, build_profile
from services.traffic_profiler.records import Record
from services.traffic_profiler.stats import change_point, ecdf_positions
from services.traffic_profiler.window import RowStore, WindowData, concat, empty

LENGTHS = ("prompt_tokens", "output_tokens")
GROW_STEP_S = 30.0


@dataclass(frozen=True)
class Change:
    metric: str
    before: float
    after: float
    ks: float
    psi: float
    since_s: float

    def to_proto(self) -> ev.MetricChange:
        return ev.MetricChange(metric=self.metric, before=self.before, after=self.after, ks=self.ks,
                               psi=self.psi, since_s=self.since_s)


@dataclass(frozen=True)
class Drift:
    drift_id: str
    t_s: float
    changes: tuple[Change, ...]
    reference: Profile
    current: Profile

    def to_proto(self, model: str = "") -> ev.DriftEvent:
        return ev.DriftEvent(
            drift_id=self.drift_id,
            t_s=self.t_s,
            changes=[c.to_proto() for c in self.changes],
            reference=self.reference.to_proto(f"{self.drift_id}:reference", model),
            current=self.current.to_proto(f"{self.drift_id}:current", model),
        )


@dataclass(frozen=True)
class Tick:
    """One evaluation, kept for reports when the detector records them."""

    t: float
    profile: Profile
    checks: tuple[Check, ...]
    drift: Drift | None


@dataclass
class Reference:
    start: float
    end: float
    data: WindowData
    rebase_at: float | None = None     # re-base once the cooldown after its change is over
    rebase_from: float | None = None   # ... onto the traffic since the change began
    cooldown_until: float = -math.inf
    streak: int = 0
    first_over: float | None = None

    def ready(self, cfg: DetectorConfig) -> bool:
        return self.data.n >= cfg.min_records and self.end - self.start >= cfg.window_s


@dataclass
class DriftDetector:
    cfg: DetectorConfig = field(default_factory=DetectorConfig)
    record_ticks: bool = False
    ticks: list[Tick] = field(default_factory=list)
    epoch: int = 0
    records: int = 0   # records released to the windows
    rewinds: int = 0
    late: int = 0      # records that came after their windows had been evaluated: dropped
    reordered: int = 0  # records that came out of order within the reordering window: put back in order
    # called with each record as it reaches the windows and its prefix-cache hit tokens (NaN: unknown)
    on_release: Callable[[Record, float], None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        cfg = self.cfg
        # the current windows' lengths, shortest first (they come from the frozen config: once)
        self.scales = [cfg.window_s, *sorted({w for w in (cfg.mid_window_s, cfg.long_window_s) if w > cfg.window_s})]
        self.grow_lag = max(cfg.window_s, cfg.mid_window_s)  # the reference grows up to T - this (_grow)
        self._reset()

    def _reset(self) -> None:
        cfg = self.cfg
        self.cache = PrefixCache(cfg.cache_blocks, cfg.block_tokens)
        self.rows = RowStore()
        self.pending: list[tuple[float, int, Record]] = []  # the reordering window: a heap by arrival
        self.seq = 0  # ties in arrival keep their order of coming
        self.newest: float | None = None  # the newest arrival seen (released or not)
        self.behind: list[Record] = []  # consecutive records far behind the newest: a replay, or stragglers
        self.latest: float | None = None  # the newest arrival released to the windows
        self.first_t = 0.0
        self.next_tick: float | None = None
        self.refs: dict[str, Reference] = {}
        hold = math.ceil(cfg.noise_hold_s / cfg.step_s)
        self.noise = {(m, w): Noise.create(cfg.phi_history_ticks, cfg.phi_default, cfg.phi_max, cfg.phi_quantile, hold)
                      for m in (*LENGTHS, "prefix_hit_rate") for w in self.scales}
        self.rebase_from: float | None = None  # a campaign completed: rebase every reference from this tick
        self.sim_since: float | None = None    # first record whose hit came from the simulated cache
        self.cache_warm = False

    # -- ingest ----------------------------------------------------------------------------------
    def observe(self, record: Record) -> list[Drift]:
        """Add one record; returns the drifts fired by the ticks it closed (usually none)."""
        t = record.arrival_s
        if self.newest is not None and t < self.newest - self.cfg.max_lateness_s:
            self.behind.append(record)
            if len(self.behind) < max(self.cfg.rewind_records, 1):
                return []
            replayed, self.behind = self.behind, []
            fired = self.flush()  # the old epoch's last records and ticks
            self.epoch += 1
            self.rewinds += 1
            self._reset()
            return fired + [d for r in replayed for d in self.observe(r)]
        if self.behind:  # a few stragglers, not a replay
            self.late += len(self.behind)
            self.behind = []
        if self.latest is not None and t < self.latest:
            self.late += 1
            return []
        if self.newest is not None and t < self.newest:
            self.reordered += 1
        self.newest = t if self.newest is None else max(self.newest, t)
        heapq.heappush(self.pending, (t, self.seq, record))
        self.seq += 1
        return self._release(self.newest - self.cfg.reorder_s)

    def drain(self) -> list[Drift]:
        """Release every record waiting for order (the live service, once traffic pauses: no later
        record will come to push them out), without evaluating ticks no record has passed yet."""
        return self._release(math.inf)

    def _release(self, upto: float) -> list[Drift]:
        fired: list[Drift] = []
        while self.pending and self.pending[0][0] <= upto:
            fired.extend(self._ingest(heapq.heappop(self.pending)[2]))
        return fired

    def _ingest(self, record: Record) -> list[Drift]:
        t = record.arrival_s
        if record.cached_tokens is not None:
            hit = float(min(record.cached_tokens, record.prompt_tokens))
        elif record.block_hashes:
            hit = float(self.cache.hit_tokens(record.block_hashes, record.prompt_tokens))
            if self.sim_since is None:
                self.sim_since = t
        else:
            hit = math.nan
        if self.next_tick is None:
            # the first tick after the first record: one at or before it would describe a window of
            # (almost) no time, a rate of one record per nanosecond
            self.next_tick = (math.floor(t / self.cfg.step_s) + 1) * self.cfg.step_s
            self.refs = {m: Reference(t - 1e-9, t - 1e-9, empty(t)) for m in METRICS}
            self.first_t = t - 1e-9
            fired: list[Drift] = []
        else:  # most records close no tick: skip the call (this is the per-record hot path)
            fired = self._advance(t) if t > self.next_tick else []
        self.rows.append(t, record.prompt_tokens, record.output_tokens, hit, record.tag, record.expert_counts)
        if self.on_release is not None:  # offline reports reuse the cache simulation's hit
            self.on_release(record, hit)
        if self.latest is None or t > self.latest:
            self.latest = t
        self.records += 1
        return fired

    def flush(self) -> list[Drift]:
        """Release every record still waiting for order and evaluate the ticks up to the newest (end of a
        trace file)."""
        fired = self._release(math.inf)
        return fired if self.latest is None else fired + self._advance(self.latest + 1e-9)

    @property
    def rebase_requested(self) -> bool:
        return self.rebase_from is not None

    def request_rebase(self) -> None:
        """A campaign completed: the traffic it tuned for becomes every reference at the next tick."""
        # at the tick of the newest arrival seen, not the next tick evaluated: that one lags the
        # newest by the reordering window, and its traffic predates what the campaign tuned for
        self.rebase_from = -math.inf if self.newest is None else self.newest

    def _advance(self, t: float) -> list[Drift]:
        fired: list[Drift] = []
        assert self.next_tick is not None and self.latest is not None
        horizon = max(self.scales[-1], self.cfg.rate_window_s) + self.cfg.step_s
        while self.next_tick < t:
            if self.next_tick > self.latest + horizon:  # a long silence: skip ticks with empty windows
                self.next_tick = math.floor(t / self.cfg.step_s) * self.cfg.step_s
                if self.next_tick >= t:
                    break
            drift = self._evaluate(self.next_tick)
            if drift is not None:
                fired.append(drift)
            self.next_tick += self.cfg.step_s
        return fired

    # -- evaluation ------------------------------------------------------------------------------
    def _evaluate(self, T: float) -> Drift | None:
        cfg = self.cfg
        self.rows.prune(T - max(self.scales[-1], cfg.rate_window_s, cfg.rate_reference_s) - cfg.window_s)
        rebase_all = self.rebase_from is not None and self.rebase_from <= T
        for metric, ref in self.refs.items():
            if rebase_all or (ref.rebase_at is not None and ref.rebase_at <= T):
                self._rebase(metric, ref, T, campaign=rebase_all)
        if rebase_all:
            self.rebase_from = None
        if not self._cache_warm(T):  # nothing to compare yet: the hit-rate reference starts once warm
            self.refs["prefix_hit_rate"] = Reference(T, T, empty(T))
        checks = {m: c for m in METRICS if (c := self._check(m, T)) is not None}
        for metric, ref in self.refs.items():
            c = checks.get(metric)
            if c is not None and c.over:
                ref.streak += 1
                ref.first_over = T if ref.first_over is None else ref.first_over
            else:
                ref.streak, ref.first_over = 0, None
                self._grow(metric, ref, T)
        due = [m for m, r in self.refs.items() if r.streak >= self._persistence(m) and r.cooldown_until <= T]
        drift = self._fire(T, due[0], [c for c in checks.values() if c.over or c.moved]) if due else None
        if self.record_ticks:
            cur = self.rows.window(max(T - cfg.window_s, self.first_t), T)
            self.ticks.append(Tick(T, build_profile(cur, cfg, with_buckets=False), tuple(checks.values()), drift))
        return drift

    def _cache_warm(self, T: float) -> bool:
        """Whether simulated hit rates may be compared yet (module docstring, "warm-up")."""
        if self.cache_warm or self.sim_since is None or self.cfg.cache_warmup_s <= 0:
            return True
        w = self.cfg.window_s
        if T - self.sim_since < max(self.cfg.cache_warmup_s, 2 * w):
            return False
        before, now = self.rows.window(T - 2 * w, T - w).hit_rate(), self.rows.window(T - w, T).hit_rate()
        self.cache_warm = before is not None and now is not None and abs(now - before) < self.cfg.hit_delta_min / 2
        return self.cache_warm

    def _persistence(self, metric: str) -> int:
        if metric == "arrival_rate":
            return max(self.cfg.persistence, math.ceil(self.cfg.rate_persistence_s / self.cfg.step_s))
        return self.cfg.persistence

    def _check(self, metric: str, T: float) -> Check | None:
        """The metric's most telling check over the window sizes, against its own reference."""
        ref = self.refs[metric]
        if not ref.ready(self.cfg):
            return None
        scales = [self.cfg.rate_window_s] if metric == "arrival_rate" else self.scales
        best: Check | None = None
        for scale in scales:
            if scale != scales[0] and T - scale < ref.end:
                continue  # cut short by the reference (module docstring)
            cur = self.rows.window(max(T - scale, ref.end), T)
            noise = self.noise.get((metric, scale))
            c = check(metric, ref.data, cur, noise.levels(metric) if noise else Levels(), self.cfg)
            if c is None:
                continue
            if noise is not None and not c.over:
                noise.ks.add(c.ks_ratio)
                noise.psi.add(c.psi_ratio)
                noise.hit.add(c.z_ratio)
                if c.locations:
                    noise.add_quiet(c.locations, c.loc_wander)
            if best is None or (c.over, c.moved, -c.pvalue) > (best.over, best.moved, -best.pvalue):
                best = c
        return best

    def _span(self, metric: str) -> float:
        return self.cfg.rate_reference_s if metric == "arrival_rate" else self.cfg.reference_s

    def _grow(self, metric: str, ref: Reference, T: float) -> None:
        # in steps of GROW_STEP_S, not every tick: the reference's derived values (sorted lengths,
        # histograms, tag counts) are then computed once per step rather than at every tick.
        # Up to the middle window (2 min), which is then whole from the first minutes (it catches a
        # prompt growth within 2 minutes on bursty traffic where the short one wavers). The long window
        # is cut while the reference grows, and skipped: holding its 5 minutes back as well was
        # measured to delay detection in the first 15 minutes more than the longer window gains
        # (benchmarks/drift_eval.py)
        target = min(T - self.grow_lag, ref.start + self._span(metric))
        step = min(GROW_STEP_S, ref.start + self._span(metric) - ref.end)
        if target - ref.end >= step and target > ref.end and ref.rebase_at is None:
            ref.data = concat(ref.data, self.rows.window(ref.end, target))
            ref.end = target

    def _rebase(self, metric: str, ref: Reference, T: float, campaign: bool) -> None:
        """The reference becomes the traffic since its change began (at most reference_s of it); after
        a campaign, the last reference_s whatever changed."""
        start = T - self._span(metric)
        if ref.rebase_from is not None and not campaign:
            start = max(start, ref.rebase_from)
        start = min(start, T - self.cfg.window_s)
        ref.start, ref.end, ref.data = start, T, self.rows.window(start, T)
        ref.rebase_at = ref.rebase_from = None
        ref.streak, ref.first_over = 0, None

    def _fire(self, T: float, driver: str, moved: list[Check]) -> Drift:
        changes = tuple(self._change(c, T) for c in moved)
        ref = self.refs[driver]
        metrics = ",".join(sorted(c.metric for c in changes))
        key = f"{self.epoch}|{ref.start:.3f}|{ref.end:.3f}|{T:.3f}|{metrics}"
        drift = Drift(
            drift_id=hashlib.sha256(key.encode()).hexdigest()[:16],
            t_s=T,
            changes=changes,
            reference=build_profile(ref.data, self.cfg),
            current=build_profile(self.rows.window(max(T - self.cfg.window_s, ref.end), T), self.cfg),
        )
        for c in changes:  # each reported metric rests, then re-bases onto its new regime
            for scale in self.scales:  # the ticks since the change began are not its quiet noise
                if (noise := self.noise.get((c.metric, scale))) is not None:
                    noise.discard_pending()
            r = self.refs[c.metric]
            r.cooldown_until = r.rebase_at = T + self.cfg.cooldown_s
            r.rebase_from = c.since_s if r.rebase_from is None else min(r.rebase_from, c.since_s)
            r.streak, r.first_over = 0, None
        return drift

    def _change(self, c: Check, T: float) -> Change:
        """The change as reported: `after` describes the traffic since the change began (when enough of
        it is known), not the whole current window, which may still hold traffic from before."""
        since = self._since(c.metric, T)
        after = c.after
        new = self.rows.window(since - 1e-9, T)
        if c.metric in LENGTHS and new.n >= self.cfg.min_records:
            after = float(np.median(new.prompt if c.metric == "prompt_tokens" else new.output))
        elif c.metric == "prefix_hit_rate" and new.hit_known().sum() >= self.cfg.min_records:
            after = new.hit_rate() or after
        return Change(c.metric, c.before, after, c.ks, c.psi, since)

    def _since(self, metric: str, T: float) -> float:
        """Estimated trace time the change began: a CUSUM scan over the records since before it showed."""
        ref = self.refs[metric]
        first = ref.first_over if ref.first_over is not None else T
        span = self.cfg.rate_window_s if metric == "arrival_rate" else self.cfg.window_s
        w = self.rows.window(max(first - span, ref.end), T)
        if w.n < 2:
            return first
        if metric in LENGTHS:
            column = "prompt" if metric == "prompt_tokens" else "output"
            ref_sorted = np.sort(getattr(ref.data, column))
            return float(w.t[change_point(ecdf_positions(ref_sorted, getattr(w, column)), 0.5)])
        if metric == "prefix_hit_rate":
            known, ref_known = w.hit_known(), ref.data.hit_known()
            if known.sum() < 2 or not ref_known.any():
                return first
            fractions = w.hit[known] / np.maximum(w.prompt[known], 1)
            baseline = float(np.mean(ref.data.hit[ref_known] / np.maximum(ref.data.prompt[ref_known], 1)))
            return float(w.t[known][change_point(fractions, baseline)])
        if metric == "arrival_rate":
            seconds = max(int(w.end - w.start), 1)
            counts = np.bincount(np.clip((w.t - w.start).astype(np.int64), 0, seconds - 1), minlength=seconds)
            return float(w.start + change_point(counts.astype(float), ref.data.n / ref.data.duration))
        return max(first - self.cfg.window_s / 2, w.start)
