"""Scenarios for the traffic generator (generator.py): random, spaced injected changes, and its CLI.

Scenarios (make_scenario): n_changes start times, uniformly random but at least min_gap_s (90 min) apart,
none in the first lead_s (90 min) nor the last hold_s (60 min). Kinds come in shuffled rounds of all
KINDS (a kind not possible at its turn waits for a later one). Each change hits every client (chance
ALL_CLIENTS, 1/2) or one of the HEAVY (3) heaviest clients present. Factors go up or down at random,
leaning (0.85) back toward no net shift (the rate: toward rate_rps, once 20 % off):
    lengths x or / LENGTH_FACTORS (1.3-3); p90 x P90_UP (1.5-2.5) or / P90_DOWN (1.3-1.8);
    rate x or / RATE_FACTORS (1.5-2.5); hit collapse x HIT_FACTORS (0.1-0.3), once per client;
    a join brings JOIN_SHARES (0.25-0.6) of rate_rps, with prompt and output medians 4x and 3x above or
    below the traffic's typical ones; a leave removes a heavy client.
Joins run at most one ahead of leaves, and no change takes the total rate outside RATE_BOUNDS (0.6-1.7)
x rate_rps.

CLI: python -m services.traffic_profiler.scenarios --rate 10 --hours 168 --changes 20 --seed 0
         --out week.jsonl [--truth truth.json] [--clients 30]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from services.traffic_profiler.generator import (
    DAY_S,
    HOLD_S,
    KINDS,
    MIN_GAP_S,
    SCENARIO_STREAM,
    GeneratorConfig,
    InjectedChange,
    Kind,
    Range,
    TenantModel,
    generate,
    tenants,
    write_jsonl,
)


@dataclass(frozen=True)
class Scenario:
    config: GeneratorConfig
    changes: tuple[InjectedChange, ...]


# --- scenarios: random changes, spaced, with kinds and factors from the documented ranges -------------
LENGTH_FACTORS: Range = (1.3, 3.0)
P90_UP: Range = (1.5, 2.5)
P90_DOWN: Range = (1.3, 1.8)      # divides; a larger cut would need sigma below zero for narrow clients
RATE_FACTORS: Range = (1.5, 2.5)
HIT_FACTORS: Range = (0.1, 0.3)
JOIN_SHARES: Range = (0.25, 0.6)  # a joining client's rate / rate_rps
RATE_BOUNDS: Range = (0.6, 1.7)   # changes keep the total rate within these multiples of rate_rps
ALL_CLIENTS = 0.5                 # chance that a change hits every client rather than one heavy client
HEAVY = 3                         # single-client changes pick among this many heaviest clients present


@dataclass
class _Picker:
    """Draws the changes one after another, tracking what is present so each change is possible."""

    config: GeneratorConfig
    rng: np.random.Generator
    kinds: Sequence[Kind]
    rate: dict[str, float] = field(default_factory=dict)    # present clients' current rates
    clients: dict[str, TenantModel] = field(default_factory=dict)
    shift: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, client): log factor so far
    joined: int = 0
    left: int = 0
    queue: list[Kind] = field(default_factory=list)  # kinds in shuffled rounds, so each comes about as often

    def __post_init__(self) -> None:
        self.clients = {t.name: t for t in tenants(self.config)}
        self.rate = {name: t.rate_rps for name, t in self.clients.items()}

    def pick(self, start_s: float) -> InjectedChange:
        """The next queued kind that is possible now (a collapse needs an uncollapsed scope, ...)."""
        for _ in range(2):
            if not self.queue:
                self.queue = [self.kinds[i] for i in self.rng.permutation(len(self.kinds))]
            for i, kind in enumerate(self.queue):
                change = self._draw(kind, start_s)
                if change is not None:
                    del self.queue[i]
                    self._apply(change)
                    return change
            self.queue = []
        raise ValueError(f"no change of kinds {self.kinds} is possible at {start_s} s")

    def _scope(self) -> list[str]:
        if self.rng.uniform() < ALL_CLIENTS:
            return list(self.rate)
        heavy = sorted(self.rate, key=self.rate.__getitem__, reverse=True)[:HEAVY]
        return [heavy[int(self.rng.integers(len(heavy)))]]

    def _up(self, kind: str, scope: list[str]) -> bool:
        """Up or down at random, leaning back toward no net shift so stacked changes stay bounded; for the
        rate, toward rate_rps in total, so joins and leaves do not carry the total rate away either."""
        if kind == "rate":
            net = math.log(sum(self.rate.values()) / self.config.rate_rps)
            net = 0.0 if abs(net) < math.log(1.2) else net
        else:
            net = float(np.mean([self.shift.get((kind, c), 0.0) for c in scope]))
        return bool(self.rng.uniform() < (0.5 if net == 0 else 0.15 if net > 0 else 0.85))

    def _draw(self, kind: Kind, start_s: float) -> InjectedChange | None:
        """A change of this kind now, or None where none is possible (the total rate would leave
        RATE_BOUNDS, the scope has already collapsed, ...)."""
        scope = self._scope()
        client = scope[0] if len(scope) == 1 else None
        u = self.rng.uniform
        total = sum(self.rate.values())
        lo, hi = (bound * self.config.rate_rps for bound in RATE_BOUNDS)
        if kind in ("prompt_p50", "output_p50"):
            factor = u(*LENGTH_FACTORS)
            return InjectedChange(kind, start_s, factor if self._up(kind, scope) else 1 / factor, client)
        if kind == "prompt_p90":
            return InjectedChange(kind, start_s, u(*P90_UP) if self._up(kind, scope) else 1 / u(*P90_DOWN), client)
        if kind == "rate":
            factor, moved = u(*RATE_FACTORS), sum(self.rate[c] for c in scope)
            up = self._up(kind, scope)
            fits = [f for f in ((factor, 1 / factor) if up else (1 / factor, factor))
                    if lo <= total + (f - 1) * moved <= hi]
            return InjectedChange(kind, start_s, fits[0], client) if fits else None
        if kind == "hit_collapse":
            if any(self.shift.get((kind, c), 0.0) for c in scope):
                return None  # collapse only what has not collapsed yet
            return InjectedChange(kind, start_s, u(*HIT_FACTORS), client)
        if kind == "client_leave":  # one heavy client (a one-client scope is always a heavy one)
            heavy = sorted(self.rate, key=self.rate.__getitem__, reverse=True)[:HEAVY]
            name = client or heavy[int(self.rng.integers(len(heavy)))]
            if len(self.rate) <= HEAVY or total - self.rate[name] < lo:
                return None
            return InjectedChange(kind, start_s, 0.0, name)
        share = u(*JOIN_SHARES)
        if self.joined > self.left or total + share * self.config.rate_rps > hi:
            return None  # joins at most one ahead of leaves
        return self._join(start_s, share)

    def _join(self, start_s: float, share: float) -> InjectedChange:
        """A heavy new client whose lengths sit well apart from the current mix."""
        cfg, u = self.config, self.rng.uniform
        weights = np.array(list(self.rate.values()))
        present = [self.clients[c] for c in self.rate]

        def apart(medians: list[float], spread: float, most: float) -> float:
            typical = math.exp(float(np.average(np.log(medians), weights=weights)))
            return float(np.clip(typical * (spread if u() < 0.5 else 1 / spread), 8.0, most / 16))

        name = f"client-{cfg.n_clients + self.joined:02d}"
        tenant = TenantModel(name, share * cfg.rate_rps,
                             apart([t.prompt_median for t in present], 4.0, cfg.max_prompt_tokens),
                             u(*cfg.prompt_sigma_range),
                             apart([t.output_median for t in present], 3.0, cfg.max_output_tokens),
                             u(*cfg.output_sigma_range), u(*cfg.hit_mean_range), u(*cfg.burst_cv_range))
        return InjectedChange("client_join", start_s, share, name, tenant)

    def _apply(self, change: InjectedChange) -> None:
        scope = [change.client] if change.client is not None else list(self.rate)
        if change.kind == "client_join":
            assert change.tenant is not None and change.client is not None
            self.clients[change.client] = change.tenant
            self.rate[change.client] = change.tenant.rate_rps
            self.joined += 1
            return
        if change.kind == "client_leave":
            del self.rate[scope[0]]
            self.left += 1
            return
        for c in scope:
            if change.kind == "rate":
                self.rate[c] *= change.factor
            key = (change.kind, c)
            self.shift[key] = self.shift.get(key, 0.0) + math.log(change.factor)


def make_scenario(rate_rps: float, hours: float, n_changes: int, seed: int, *, base: GeneratorConfig | None = None,
                  min_gap_s: float = MIN_GAP_S, lead_s: float = MIN_GAP_S, hold_s: float = HOLD_S,
                  kinds: Sequence[Kind] = KINDS) -> Scenario:
    """n_changes random changes (0: a pure no-change trace), at random times at least min_gap_s apart,
    none in the first lead_s nor the last hold_s. Other model parameters come from base."""
    config = replace(base or GeneratorConfig(), rate_rps=rate_rps, duration_s=hours * 3600.0, seed=seed)
    rng = np.random.default_rng([seed, SCENARIO_STREAM])
    room = config.duration_s - hold_s - lead_s - (n_changes - 1) * min_gap_s
    if n_changes > 0 and room < 0:
        raise ValueError(f"{n_changes} changes {min_gap_s / 60:.0f} min apart, after {lead_s / 60:.0f} min and "
                         f"{hold_s / 60:.0f} min before the end, need more than {hours} h")
    starts = np.round(lead_s + np.sort(rng.uniform(0.0, max(room, 0.0), n_changes))
                      + np.arange(n_changes) * min_gap_s)
    picker = _Picker(config, rng, kinds)
    return Scenario(config, tuple(picker.pick(float(s)) for s in starts))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.traffic_profiler.scenarios", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=10.0, help="mean total requests per second")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--changes", type=int, default=0, help="injected changes (0: a no-change trace)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=GeneratorConfig.n_clients)
    parser.add_argument("--out", type=Path, required=True, help="JSONL trace to write")
    parser.add_argument("--truth", type=Path, help="ground truth JSON to write")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    scenario = make_scenario(args.rate, args.hours, args.changes, args.seed,
                             base=GeneratorConfig(n_clients=args.clients))
    for change in scenario.changes:
        print(change.describe())
    trace = generate(scenario.config, scenario.changes)
    print(f"generated {len(trace):,} requests in {time.perf_counter() - began:.1f} s", flush=True)

    def progress(trace_s: float, rows: int) -> None:
        if trace_s % DAY_S == 0 or trace_s >= scenario.config.duration_s:
            print(f"  wrote {trace_s / 3600:.0f} h, {rows:,} requests ({time.perf_counter() - began:.1f} s)",
                  flush=True)

    write_jsonl(trace, args.out, progress)
    if args.truth is not None:
        args.truth.write_text(json.dumps(trace.truth(), indent=1) + "\n")
    print(f"{args.out} written in {time.perf_counter() - began:.1f} s" + (f"; truth in {args.truth}" if args.truth
                                                                           else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
