"""Multi-tenant synthetic traffic with known injected changes: ground truth for the drift detector.

Unlike synthetic.py (a bootstrap of a real trace) this draws traffic from a parametric model, so any
rate, duration and set of changes can be made, and the truth of every change is known exactly.

The model (GeneratorConfig; a range (lo, hi) is drawn from uniformly per client, a median range in log):
- Clients. n_clients tenants named client-00, client-01, ... in decreasing rate. Client i's rate is
  rate_rps * w_i / sum(w) with w_i = (i + 1) ** -share_zipf: with the defaults (30 clients, 1.2) the top
  client carries ~30 % of the requests and the top three ~50 %, so they drive most of the variability.
- Arrivals. Each client is a renewal process: Gamma inter-arrivals with coefficient of variation
  burst_cv (> 1: bursty, not Poisson), run in operational time and mapped to trace time through the
  client's cumulative intensity (time-rescaling), rate_i * d(t) * r_i(t). The diurnal factor
  d(t) = (1 + diurnal_amplitude * cos(2 pi (t - diurnal_peak_s) / 24 h)) / its mean over [0, duration_s]
  (t = 0 is midnight), so the expected total rate over the trace is exactly rate_rps when no change
  alters the rate; r_i(t) is the piecewise-constant multiplier of the injected changes (0 before a join,
  after a leave). Times are whole milliseconds; the clients' streams are merged by time.
- Lengths. Prompt and output tokens are lognormal per client: median prompt_median (a draw in
  prompt_median_range) and log-sigma prompt_sigma (prompt_sigma_range), likewise for outputs; rounded
  and clipped to [1, max_prompt_tokens] / [1, max_output_tokens].
- Cache hits. Each request's hit fraction is Beta with the client's mean hit_mean (hit_mean_range) and
  concentration hit_concentration (a + b); cached_tokens = floor(fraction * prompt_tokens).
- Wander (natural variability, not a change). Every wander_step_s (10 min) each client's log prompt and
  log output medians take an AR(1) step: w <- wander_keep * w + N(0, wander_sigma). Mean reversion keeps
  the wander stationary (sd wander_sigma / sqrt(1 - wander_keep^2), ~12 % with the defaults), so it never
  adds up to a sustained shift.

Injected changes (InjectedChange) start at start_s and last to the end of the trace; they compose in
time order. `factor` multiplies one quantity of `client` (of every client present when client is None):
    prompt_p50, output_p50   the median length (the sigma is kept, so every quantile moves alike)
    prompt_p90               the prompt p90 at the same median: sigma += ln(factor) / z_0.9
    rate                     the request rate
    hit_collapse             the mean cache-hit fraction (e.g. 0.6 -> 0.1 is factor 1/6)
    client_leave             the client's rate (factor 0: it sends nothing more)
    client_join              `tenant`, a new client, starts sending; factor is its rate / rate_rps
A joined client is subject only to the changes after its join.

`quiet_stretches` gives the stretches at least guard_s (30 min) away from any change start, on which
an evaluator counts false alarms per hour.

Files: write_jsonl writes one JSON object per line in the RequestRecord field names (`arrival_s` in
seconds, `prompt_tokens`, `output_tokens`, `cached_tokens`, `tag` = the client), which
readers.read_trace (and so `polymorph profile`) detects. The reader counts time from the first record,
so its times are the generator's minus `first_arrival_s` (kept in the truth JSON; a few seconds at most).

Scenarios (random, spaced changes) and the command line: scenarios.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from services.traffic_profiler.records import Record

Kind = Literal["prompt_p50", "output_p50", "prompt_p90", "rate", "client_join", "client_leave", "hit_collapse"]
KINDS: tuple[Kind, ...] = get_args(Kind)
Z90 = 1.2815515655446004  # standard normal 90th percentile: p90 = median * exp(Z90 * sigma)
DAY_S = 86_400.0
GRID_S = 60.0             # cumulative intensity tabulated this finely (and at every change) for rescaling
BURN_IN = 32.0            # mean gaps run before t = 0, so each renewal process starts near equilibrium
MIN_GAP_S = 90 * 60.0     # detectable within 15 min, and the stretch before each change is stationary
HOLD_S = 60 * 60.0        # a change lasts at least this long before the trace ends
QUIET_GUARD_S = 30 * 60.0
CHUNK = 65_536
# stream ids: the tenants, and each client's wander, arrivals and lengths draw from their own generators,
# so a change to one client's lengths leaves every arrival time (and every other client) as it was
_TENANTS, SCENARIO_STREAM, _WANDER, _ARRIVALS, _LENGTHS = range(5)
_MOVES: dict[str, tuple[str, ...]] = {  # checks.METRICS each kind should move, the main one first
    "prompt_p50": ("prompt_tokens",), "prompt_p90": ("prompt_tokens",), "output_p50": ("output_tokens",),
    "rate": ("arrival_rate",), "hit_collapse": ("prefix_hit_rate",),
    "client_join": ("tag_mix", "arrival_rate", "prompt_tokens"), "client_leave": ("tag_mix", "arrival_rate"),
}
Range = tuple[float, float]


@dataclass(frozen=True)
class TenantModel:
    """One client's traffic before any change (its wander aside)."""

    name: str
    rate_rps: float       # mean over the trace, diurnal cycle included
    prompt_median: float
    prompt_sigma: float   # of log prompt tokens
    output_median: float
    output_sigma: float
    hit_mean: float       # mean prefix-cache hit fraction
    burst_cv: float       # coefficient of variation of the inter-arrival times


@dataclass(frozen=True)
class GeneratorConfig:
    """The traffic model; see the module docstring for what each parameter means."""

    rate_rps: float = 10.0
    duration_s: float = 6 * 3600.0
    n_clients: int = 30
    seed: int = 0
    share_zipf: float = 1.2
    burst_cv_range: Range = (1.5, 3.0)
    diurnal_amplitude: float = 0.4
    diurnal_peak_s: float = 14 * 3600.0
    prompt_median_range: Range = (150.0, 6000.0)
    prompt_sigma_range: Range = (0.5, 1.1)
    output_median_range: Range = (40.0, 800.0)
    output_sigma_range: Range = (0.4, 0.9)
    hit_mean_range: Range = (0.2, 0.8)
    hit_concentration: float = 8.0
    wander_step_s: float = 600.0
    wander_sigma: float = 0.07
    wander_keep: float = 0.8
    max_prompt_tokens: int = 131_072
    max_output_tokens: int = 16_384

    def __post_init__(self) -> None:
        if self.rate_rps <= 0 or self.duration_s <= 0 or self.n_clients < 1:
            raise ValueError("rate_rps and duration_s must be positive and n_clients at least 1")
        if not 0 <= self.diurnal_amplitude < 1:
            raise ValueError(f"diurnal_amplitude {self.diurnal_amplitude} is not in [0, 1)")
        if min(self.burst_cv_range) <= 0 or not 0 <= self.wander_keep < 1:
            raise ValueError("burst_cv_range must be positive and wander_keep in [0, 1)")


@dataclass(frozen=True)
class InjectedChange:
    """A known, sustained change from start_s to the end of the trace (factor: see the module docstring)."""

    kind: Kind
    start_s: float
    factor: float
    client: str | None = None          # None: every client present
    tenant: TenantModel | None = None  # client_join: the new client

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown change kind {self.kind!r}; known: {KINDS}")
        if self.kind in ("client_join", "client_leave") and self.client is None:
            raise ValueError(f"{self.kind} needs a client")
        if self.kind == "client_join" and (self.tenant is None or self.tenant.name != self.client):
            raise ValueError("client_join needs the joining tenant, named as its client")
        if self.factor < 0 or (self.factor == 0 and self.kind != "client_leave"):
            raise ValueError(f"factor {self.factor} must be positive")

    @property
    def metrics(self) -> tuple[str, ...]:
        """The detector metrics (checks.METRICS) this change should move, the main one first."""
        if self.kind == "rate" and self.client is not None:
            return ("tag_mix", "arrival_rate")
        return _MOVES[self.kind]

    def describe(self) -> str:
        who = self.client or "all clients"
        if self.kind == "client_join":
            return f"{self.start_s / 3600:7.2f} h  {who} joins with {self.factor:.0%} of the base rate"
        if self.kind == "client_leave":
            return f"{self.start_s / 3600:7.2f} h  {who} leaves"
        return f"{self.start_s / 3600:7.2f} h  {self.kind} x{self.factor:.2f} on {who}"


@dataclass(frozen=True, eq=False)
class GeneratedTrace:
    """Columnar requests sorted by arrival; row i's client is tenants[client[i]]."""

    config: GeneratorConfig
    tenants: tuple[TenantModel, ...]
    changes: tuple[InjectedChange, ...]
    arrival_s: np.ndarray      # float64, whole milliseconds
    prompt_tokens: np.ndarray  # int32
    output_tokens: np.ndarray  # int32
    cached_tokens: np.ndarray  # int32
    client: np.ndarray         # int16

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def tags(self) -> np.ndarray:
        return np.array([t.name for t in self.tenants], dtype=object)[self.client]

    def records(self) -> Iterator[Record]:
        """The requests as the detector consumes them (generator time: t = 0 is the trace start)."""
        names = [t.name for t in self.tenants]
        for lo in range(0, len(self), CHUNK):
            rows = slice(lo, lo + CHUNK)
            columns = (self.arrival_s[rows].tolist(), self.prompt_tokens[rows].tolist(),
                       self.output_tokens[rows].tolist(), self.cached_tokens[rows].tolist(),
                       self.client[rows].tolist())
            for t, prompt, output, cached, c in zip(*columns, strict=True):
                yield Record(t, prompt, output, cached, tag=names[c])

    def truth(self, guard_s: float = QUIET_GUARD_S) -> dict[str, Any]:
        """The ground truth as JSON-ready data."""
        return {
            "config": asdict(self.config),
            "records": len(self),
            "first_arrival_s": float(self.arrival_s[0]) if len(self) else 0.0,
            "tenants": [asdict(t) for t in self.tenants],
            "changes": [{**asdict(c), "metrics": list(c.metrics), "describe": c.describe()} for c in self.changes],
            "quiet_guard_s": guard_s,
            "quiet_stretches": quiet_stretches(self.changes, self.config.duration_s, guard_s),
        }


def tenants(config: GeneratorConfig) -> tuple[TenantModel, ...]:
    """The config's clients, heaviest first (deterministic in config.seed)."""
    rng = np.random.default_rng([config.seed, _TENANTS])
    n = config.n_clients
    weights = np.arange(1, n + 1, dtype=float) ** -config.share_zipf
    rates = config.rate_rps * weights / weights.sum()

    def log_uniform(bounds: Range) -> np.ndarray:
        return np.exp(rng.uniform(math.log(bounds[0]), math.log(bounds[1]), n))

    prompt_median, output_median = log_uniform(config.prompt_median_range), log_uniform(config.output_median_range)
    prompt_sigma, output_sigma = rng.uniform(*config.prompt_sigma_range, n), rng.uniform(*config.output_sigma_range, n)
    hit_mean, burst_cv = rng.uniform(*config.hit_mean_range, n), rng.uniform(*config.burst_cv_range, n)
    return tuple(
        TenantModel(f"client-{i:02d}", float(rates[i]), float(prompt_median[i]), float(prompt_sigma[i]),
                    float(output_median[i]), float(output_sigma[i]), float(hit_mean[i]), float(burst_cv[i]))
        for i in range(n)
    )


@dataclass(frozen=True)
class _Schedule:
    """A client's state in each segment [starts[j], starts[j + 1]) between the changes that touch it."""

    starts: np.ndarray
    rate: np.ndarray          # multiplier of tenant.rate_rps (0: absent)
    prompt_shift: np.ndarray  # log multiplier of the prompt median
    prompt_sigma: np.ndarray
    output_shift: np.ndarray
    hit_mean: np.ndarray


def _schedule(tenant: TenantModel, changes: Sequence[InjectedChange]) -> _Schedule:
    join = next((c.start_s for c in changes if c.kind == "client_join" and c.client == tenant.name), None)
    present, rate, prompt, sigma, output, hit = join is None, 1.0, 0.0, tenant.prompt_sigma, 0.0, tenant.hit_mean
    rows = [(0.0, present * rate, prompt, sigma, output, hit)]
    for c in sorted(changes, key=lambda c: c.start_s):
        if c.client not in (None, tenant.name) or (join is not None and c.start_s < join):
            continue
        if c.kind == "client_join":
            present = True
        elif c.kind == "client_leave":
            present = False
        elif c.kind == "rate":
            rate *= c.factor
        elif c.kind == "prompt_p50":
            prompt += math.log(c.factor)
        elif c.kind == "output_p50":
            output += math.log(c.factor)
        elif c.kind == "prompt_p90":
            sigma = max(0.05, sigma + math.log(c.factor) / Z90)
        elif c.kind == "hit_collapse":
            hit *= c.factor
        rows.append((c.start_s, present * rate, prompt, sigma, output, hit))
    starts, rates, prompts, sigmas, outputs, hits = (np.array(col, dtype=float) for col in zip(*rows, strict=True))
    return _Schedule(starts, rates, prompts, sigmas, outputs, np.clip(hits, 1e-3, 1 - 1e-3))


def _diurnal_integral(config: GeneratorConfig, t: np.ndarray) -> np.ndarray:
    """integral_0^t d(s) ds, with d normalised to mean 1 over the trace."""
    a, w = config.diurnal_amplitude, 2 * math.pi / DAY_S
    raw = t + a / w * (np.sin(w * (t - config.diurnal_peak_s)) + math.sin(w * config.diurnal_peak_s))
    total = config.duration_s + a / w * (math.sin(w * (config.duration_s - config.diurnal_peak_s))
                                         + math.sin(w * config.diurnal_peak_s))
    return raw * (config.duration_s / total)


def _renewal(rng: np.random.Generator, total: float, cv: float) -> np.ndarray:
    """Sorted event times in [0, total) of a unit-rate renewal process with Gamma gaps of this CV."""
    shape = 1.0 / (cv * cv)
    parts, last = [], -BURN_IN
    while last < total:
        left = total - last
        u = last + np.cumsum(rng.gamma(shape, 1.0 / shape, int(left * 1.02 + 6 * cv * math.sqrt(left) + 64)))
        parts.append(u)
        last = float(u[-1])
    u = np.concatenate(parts)
    return u[np.searchsorted(u, 0.0):np.searchsorted(u, total)]


def _wander(rng: np.random.Generator, steps: int, config: GeneratorConfig) -> np.ndarray:
    """(2, steps) AR(1) log multipliers of the prompt and output medians, started stationary."""
    w = rng.standard_normal((2, steps)) * config.wander_sigma
    w[:, 0] /= math.sqrt(1 - config.wander_keep ** 2)
    for k in range(1, steps):
        w[:, k] += config.wander_keep * w[:, k - 1]
    return w


def _tokens(log_tokens: np.ndarray, most: int) -> np.ndarray:
    return np.clip(np.rint(np.exp(log_tokens)), 1, most).astype(np.int32)


def _client_requests(config: GeneratorConfig, index: int, tenant: TenantModel,
                     plan: _Schedule) -> tuple[np.ndarray, ...]:
    """(arrival_s, prompt, output, cached) of one client."""
    end = config.duration_s
    grid = np.union1d(np.arange(0.0, end, GRID_S), np.append(plan.starts[plan.starts < end], end))
    segment = np.searchsorted(plan.starts, grid[:-1], side="right") - 1
    expected = np.concatenate(([0.0], np.cumsum(tenant.rate_rps * plan.rate[segment]
                                                 * np.diff(_diurnal_integral(config, grid)))))
    u = _renewal(np.random.default_rng([config.seed, _ARRIVALS, index]), float(expected[-1]), tenant.burst_cv)
    t = np.floor(np.interp(u, expected, grid) * 1000.0) / 1000.0  # rate-0 stretches are flat: none land there
    steps = int(end // config.wander_step_s) + 1
    wander = _wander(np.random.default_rng([config.seed, _WANDER, index]), steps, config)
    rng = np.random.default_rng([config.seed, _LENGTHS, index])
    seg = np.searchsorted(plan.starts, t, side="right") - 1
    step = (t // config.wander_step_s).astype(np.intp)
    prompt = _tokens(math.log(tenant.prompt_median) + plan.prompt_shift[seg] + wander[0, step]
                     + plan.prompt_sigma[seg] * rng.standard_normal(t.size), config.max_prompt_tokens)
    output = _tokens(math.log(tenant.output_median) + plan.output_shift[seg] + wander[1, step]
                     + tenant.output_sigma * rng.standard_normal(t.size), config.max_output_tokens)
    hit, k = plan.hit_mean[seg], config.hit_concentration
    cached = np.floor(rng.beta(k * hit, k * (1 - hit)) * prompt).astype(np.int32)
    return t, prompt, output, cached


def generate(config: GeneratorConfig, changes: Sequence[InjectedChange] = ()) -> GeneratedTrace:
    """The traffic of config with the changes injected (deterministic in config.seed)."""
    changes = tuple(sorted(changes, key=lambda c: c.start_s))
    every = tenants(config) + tuple(c.tenant for c in changes if c.tenant is not None)
    names = [t.name for t in every]
    if len(set(names)) != len(names):
        raise ValueError("a joining client reuses a client name")
    for c in changes:
        if c.client is not None and c.client not in names:
            raise ValueError(f"change on unknown client {c.client!r}")
        if not 0 <= c.start_s < config.duration_s:
            raise ValueError(f"change at {c.start_s} s is outside the trace [0, {config.duration_s}) s")
    parts = [_client_requests(config, i, t, _schedule(t, changes)) for i, t in enumerate(every)]
    order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
    client = np.concatenate([np.full(p[0].size, i, dtype=np.int16) for i, p in enumerate(parts)])
    arrival, prompt, output, cached = (np.concatenate([p[j] for p in parts])[order] for j in range(4))
    return GeneratedTrace(config, every, changes, arrival, prompt, output, cached, client[order])


def quiet_stretches(changes: Sequence[InjectedChange], duration_s: float,
                    guard_s: float = QUIET_GUARD_S) -> list[tuple[float, float]]:
    """The (start_s, end_s) stretches with no change within guard_s: where every alarm is a false one."""
    stretches, start = [], 0.0
    for t in sorted(c.start_s for c in changes):
        if t - guard_s > start:
            stretches.append((start, t - guard_s))
        start = max(start, t + guard_s)
    if start < duration_s:
        stretches.append((start, duration_s))
    return stretches


# --- JSONL output ---------------------------------------------------------------------------------------
def _lines(trace: GeneratedTrace, rows: slice, names: pa.Array) -> pa.StringArray:
    """JSONL lines (newline included) of trace rows, formatted by Arrow in C++."""
    ms = np.rint(trace.arrival_s[rows] * 1000.0).astype(np.int64)

    def text(values: np.ndarray) -> pa.Array:
        return pc.cast(pa.array(values), pa.string())

    return pc.binary_join_element_wise(
        '{"arrival_s":', text(ms // 1000), ".", pc.utf8_lpad(text(ms % 1000), 3, "0"),
        ',"prompt_tokens":', text(trace.prompt_tokens[rows]), ',"output_tokens":', text(trace.output_tokens[rows]),
        ',"cached_tokens":', text(trace.cached_tokens[rows]), ',"tag":"', pc.take(names, pa.array(trace.client[rows])),
        '"}\n', "")


def write_jsonl(trace: GeneratedTrace, path: Path, progress: Callable[[float, int], None] | None = None) -> int:
    """Write the trace one trace-hour at a time (bounded memory); progress(trace_s, rows) after each hour.
    Returns the rows written."""
    names = pa.array([t.name for t in trace.tenants])  # plain names: nothing to escape in JSON
    hours = np.arange(0.0, trace.config.duration_s + 3600.0, 3600.0)
    bounds = np.searchsorted(trace.arrival_s, hours)
    with open(path, "wb") as fh:
        for hour, lo, hi in zip(hours[1:], bounds[:-1], bounds[1:], strict=True):
            if hi > lo:
                lines = _lines(trace, slice(int(lo), int(hi)), names)
                offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
                data = memoryview(lines.buffers()[2])
                fh.write(data[offsets[lines.offset]:offsets[lines.offset + len(lines)]])
            if progress is not None:
                progress(float(min(hour, trace.config.duration_s)), int(hi))
    return len(trace)
