"""The drift detector on generated multi-tenant traffic it was not tuned on (issue 17's acceptance).

    .venv/bin/python benchmarks/drift_generated.py [--quick] [--workers 2] [--hours 48] [--seeds 1]
        [--out benchmarks/results/drift-generated.json] [--no-markdown]

For each total rate in RATES (0.5 to 50 req/s), `--seeds` scenarios of `--hours` hours from the generator
(services/traffic_profiler/generator.py, scenarios.py: 30 bursty clients, a diurnal cycle, wandering
lengths, injected changes at least 90 minutes apart), run through the detector with its defaults, the
way `polymorph profile` runs it. Per injected change:
- its realised effect on the aggregate traffic, from the trace itself: the p50 and p90 ratio of the
  changed length over the 30 minutes after vs the 30 before (rate: the request count ratio; hit
  collapse: the token hit rate before and after; joins and leaves: the client's share of requests);
- whether a report naming one of the metrics it should move came within WITHIN_S (15 min) of its
  start, and the delay.
False reports are the reports on the generator's quiet stretches (30 minutes or more from any change),
per 10 hours; a report is also counted "below the minimum" when none of its changes reaches the
detector's own minimum effect (MIN_EFFECT here, stated in the table).
Writes the JSON file and the BENCHMARKS.md section `drift-generated` (a table by rate band).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from rich.progress import Progress, TimeElapsedColumn  # noqa: E402

from benchmarks.markdown import update_section  # noqa: E402
from services.traffic_profiler.config import DetectorConfig  # noqa: E402
from services.traffic_profiler.detector import Drift, DriftDetector  # noqa: E402
from services.traffic_profiler.generator import GeneratedTrace, InjectedChange, generate, quiet_stretches  # noqa: E402
from services.traffic_profiler.scenarios import MIN_GAP_S, make_scenario  # noqa: E402

RATES = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
WITHIN_S = 900.0
EFFECT_S = 1800.0   # the realised effect: 30 minutes after the start against the 30 before
TARGET_FACTOR = 1.5  # the acceptance's "length changes of >= 1.5x in p50 or p90"
# the smallest effect a report may claim (a metric's before/after): lengths and rates as a ratio, hit
# rate and tag shares as an absolute difference
MIN_EFFECT = {"prompt_tokens": 1.2, "output_tokens": 1.2, "arrival_rate": 1.3, "prefix_hit_rate": 0.05,
              "tag_mix": 0.05, "expert_load": 0.0}
RATIO_METRICS = ("prompt_tokens", "output_tokens", "arrival_rate")


def _ratio(a: float, b: float) -> float:
    if a <= 0 or b <= 0:
        return math.inf if a != b else 1.0
    return max(a / b, b / a)


def realised_effect(trace: GeneratedTrace, change: InjectedChange) -> dict[str, float]:
    """What the change did to the aggregate traffic over the EFFECT_S before and after its start."""
    t, s = trace.arrival_s, change.start_s
    before = (t >= s - EFFECT_S) & (t < s)
    after = (t >= s) & (t < s + EFFECT_S)
    if change.kind in ("prompt_p50", "prompt_p90", "output_p50"):
        column = trace.prompt_tokens if change.kind.startswith("prompt") else trace.output_tokens
        if not before.any() or not after.any():
            return {"p50": 1.0, "p90": 1.0, "factor": 1.0}
        p50 = _ratio(float(np.median(column[after])), float(np.median(column[before])))
        p90 = _ratio(float(np.quantile(column[after], 0.9)), float(np.quantile(column[before], 0.9)))
        return {"p50": round(p50, 3), "p90": round(p90, 3), "factor": round(max(p50, p90), 3)}
    if change.kind == "rate":
        return {"factor": round(_ratio(float(after.sum()), float(before.sum())), 3)}
    if change.kind == "hit_collapse":
        def hit(mask: np.ndarray) -> float:
            return float(trace.cached_tokens[mask].sum() / max(trace.prompt_tokens[mask].sum(), 1))
        return {"before": round(hit(before), 3), "after": round(hit(after), 3),
                "factor": round(abs(hit(before) - hit(after)), 3)}
    index = [t.name for t in trace.tenants].index(change.client)

    def share(mask: np.ndarray) -> float:
        return float((trace.client[mask] == index).mean()) if mask.any() else 0.0

    return {"before": round(share(before), 3), "after": round(share(after), 3),
            "factor": round(abs(share(after) - share(before)), 3)}


def claimed_effect(drift: Drift) -> float:
    """How far past its metric's minimum the report's largest change is (>= 1: at or over)."""
    best = 0.0
    for c in drift.changes:
        floor = MIN_EFFECT.get(c.metric, 0.0)
        if c.metric in RATIO_METRICS:
            effect = _ratio(c.after, c.before)
            best = max(best, (effect - 1) / (floor - 1) if floor > 1 else math.inf)
        else:
            effect = abs(c.after - c.before)
            best = max(best, effect / floor if floor > 0 else math.inf)
    return best


def run_scenario(job: tuple[float, int, float]) -> dict[str, Any]:
    rate, seed, hours = job
    n_changes = max(int((hours * 3600 - 2 * MIN_GAP_S) // (1.4 * MIN_GAP_S)), 0)
    scenario = make_scenario(rate, hours, n_changes, seed)
    trace = generate(scenario.config, scenario.changes)
    detector = DriftDetector(DetectorConfig())
    began = time.process_time()
    drifts: list[Drift] = []
    for record in trace.records():
        drifts.extend(detector.observe(record))
    drifts.extend(detector.flush())
    cpu_s = time.process_time() - began
    changes = []
    for change in scenario.changes:
        first = next((d for d in drifts if change.start_s <= d.t_s <= change.start_s + WITHIN_S
                      and {c.metric for c in d.changes} & set(change.metrics)), None)
        changes.append({"kind": change.kind, "client": change.client or "all", "start_s": change.start_s,
                        "factor": round(change.factor, 3), "metrics": list(change.metrics),
                        "effect": realised_effect(trace, change),
                        "delay_s": None if first is None else round(first.t_s - change.start_s, 1)})
    stretches = quiet_stretches(scenario.changes, scenario.config.duration_s)
    quiet = [d for d in drifts if any(lo <= d.t_s < hi for lo, hi in stretches)]
    return {"rate": rate, "seed": seed, "hours": hours, "records": len(trace), "cpu_s": round(cpu_s, 1),
            "changes": changes, "quiet_hours": round(sum(hi - lo for lo, hi in stretches) / 3600, 2),
            "reports": len(drifts),
            "false_reports": [{"t_s": d.t_s, "metrics": sorted({c.metric for c in d.changes}),
                               "claimed": round(claimed_effect(d), 2),
                               "changes": [(c.metric, round(c.before, 3), round(c.after, 3)) for c in d.changes]}
                              for d in quiet],
            "below_minimum": sum(1 for d in drifts if claimed_effect(d) < 1)}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rate in sorted({r["rate"] for r in runs}):
        band = [r for r in runs if r["rate"] == rate]
        changes = [c for r in band for c in r["changes"]]

        def found(selected: list[dict[str, Any]]) -> tuple[int, int]:
            return sum(1 for c in selected if c["delay_s"] is not None), len(selected)

        lengths = [c for c in changes if c["kind"] in ("prompt_p50", "prompt_p90", "output_p50")
                   and c["effect"]["factor"] >= TARGET_FACTOR]
        rates = [c for c in changes if c["kind"] == "rate" and c["client"] == "all"
                 and c["effect"]["factor"] >= TARGET_FACTOR]
        others = [c for c in changes if c not in lengths and c not in rates]
        delays = [c["delay_s"] for c in changes if c["delay_s"] is not None]
        quiet_h = sum(r["quiet_hours"] for r in band)
        false = sum(len(r["false_reports"]) for r in band)
        rows.append({"rate": rate, "hours": sum(r["hours"] for r in band), "records": sum(r["records"] for r in band),
                     "changes": len(changes), "lengths_found": found(lengths), "rates_found": found(rates),
                     "others_found": found(others),
                     "median_delay_s": round(statistics.median(delays), 1) if delays else None,
                     "quiet_hours": round(quiet_h, 1), "false_reports": false,
                     "false_per_10h": round(false / quiet_h * 10, 2) if quiet_h else None,
                     "below_minimum": sum(r["below_minimum"] for r in band),
                     "records_per_cpu_s": round(sum(r["records"] for r in band) / max(sum(r["cpu_s"] for r in band),
                                                                                     1e-9))})
    return rows


def _pct(pair: tuple[int, int] | list[int]) -> str:
    hit, total = pair
    return f"{hit}/{total} ({hit / total:.0%})" if total else "-"


def markdown(res: dict[str, Any], command: str) -> str:
    rows = [f"| {r['rate']:g} | {r['hours']:g} | {r['records']:,} | {r['changes']} | {_pct(r['lengths_found'])} | "
            f"{_pct(r['rates_found'])} | {_pct(r['others_found'])} | {r['median_delay_s']} | {r['quiet_hours']} | "
            f"{r['false_reports']} ({r['false_per_10h']}) | {r['below_minimum']} | {r['records_per_cpu_s']:,} |"
            for r in res["bands"]]
    floors = ", ".join(f"{m} {v:g}" for m, v in MIN_EFFECT.items() if v)
    return "\n".join([
        "## Drift detector on generated multi-tenant traffic (`benchmarks/drift_generated.py`)",
        "",
        f"{res['meta']['date']}, commit {res['meta']['commit']}. Detector defaults; 30 bursty clients (Gamma "
        "inter-arrivals, CV 1.5-3), a diurnal cycle, lengths wandering in 10-minute steps, injected changes at "
        f"least 90 minutes apart. Found = a report naming the change's metric within {WITHIN_S / 60:.0f} minutes. "
        f"Length and rate rows count changes whose realised aggregate effect is >= {TARGET_FACTOR}x; other "
        "changes (smaller ones, single-client rates, joins, leaves, hit collapses) are in `others`. False "
        f"reports: on stretches 30 minutes or more from any change. Minimum effects: {floors}. Command:",
        "",
        f"    {command}",
        "",
        "| req/s | hours | records | changes | lengths >= 1.5x found | rate >= 1.5x found | others found | "
        "median delay s | quiet h | false reports (per 10 h) | below minimum | records / CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="8 h per rate, three rates")
    p.add_argument("--hours", type=float, default=48.0)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--rates", type=str, default=",".join(f"{r:g}" for r in RATES))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "drift-generated.json")
    p.add_argument("--no-markdown", action="store_true")
    args = p.parse_args()
    rates = [1.0, 5.0, 20.0] if args.quick else [float(r) for r in args.rates.split(",")]
    hours = 8.0 if args.quick else args.hours
    # the heaviest first, so the pool is not left waiting on one long job at the end
    jobs = sorted(((rate, seed, hours) for rate in rates for seed in range(args.seeds)), key=lambda j: -j[0])
    runs = []
    with Progress(*Progress.get_default_columns(), TimeElapsedColumn()) as progress, \
            multiprocessing.get_context("fork").Pool(args.workers) as pool:
        task = progress.add_task("scenarios", total=len(jobs))
        for result in pool.imap_unordered(run_scenario, jobs):
            runs.append(result)
            progress.advance(task)
    commit = os.popen(f"git -C {REPO} rev-parse --short HEAD").read().strip()
    res = {"meta": {"date": dt.date.today().isoformat(), "commit": commit, "hours": hours, "seeds": args.seeds,
                    "min_effect": MIN_EFFECT, "within_s": WITHIN_S},
           "bands": summarise(runs), "runs": sorted(runs, key=lambda r: (r["rate"], r["seed"]))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    text = markdown(res, ".venv/bin/python benchmarks/drift_generated.py " + " ".join(sys.argv[1:]))
    print(text)
    if not args.no_markdown and not args.quick:
        update_section("drift-generated", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
