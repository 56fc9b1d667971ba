"""`polymorph profile TRACE [--json] [--plot FILE]`: windows, detected changes, a plot.

With json_out the only thing on stdout is one JSON object:
    {"trace", "records", "malformed", "errors", "seconds", "config",
     "changes": [{"t_s", "metric", "before", "after", "ks", "psi", "since_s", "drift_id"}, ...],
     "drifts":  [{"drift_id", "t_s", "metrics", "buckets"}, ...],
     "windows": [{"t_s", "requests", "prompt_p50", "prompt_p90", "output_p50", "output_p90",
                  "arrival_rate", "burstiness", "prefix_hit_rate", "concurrency"}, ...],
     "profile": the whole trace's profile (quantiles, octave histograms, tags, buckets)}
t_s is trace time: seconds since the trace's first record (the tick that reported the change);
since_s estimates when the change began. before/after are the reference and current windows'
summary values (medians for lengths, requests/s, token hit rate, expert imbalance, tag share).
A window without requests has null lengths.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.detector import LENGTHS
from services.traffic_profiler.offline import TraceProfile, profile_trace
from services.traffic_profiler.readers import ColumnMapping

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

METRIC_COLOURS = {"prompt_tokens": "tab:red", "output_tokens": "tab:orange", "arrival_rate": "tab:blue",
                  "prefix_hit_rate": "tab:green", "expert_load": "tab:purple", "tag_mix": "tab:brown"}


MAX_LATE_SHARE = 0.01  # more records dropped as late than this: the profile would not describe the file


def profile_command(path: Path, *, json_out: bool, plot: Path | None, config: DetectorConfig | None = None,
                    mapping: ColumnMapping | None = None) -> int:
    """Profile a trace file; 0 on success, 2 when the file cannot be read as a trace, holds no record,
    or is too far from time-sorted to profile (records dropped as late)."""
    console = Console(stderr=json_out)
    try:
        result = profile_trace(Path(path), config, mapping=mapping)
    except (OSError, ValueError) as exc:
        console.print(f"[red]cannot profile {path}: {exc}[/red]")
        return 2
    if result.records == 0:
        why = f"; {result.malformed} malformed lines, first: {result.errors[0]}" if result.errors else ""
        console.print(f"[red]cannot profile {path}: no records{why}[/red]")
        return 2
    if result.late > MAX_LATE_SHARE * result.records:
        console.print(f"[red]cannot profile {path}: {result.late} of {result.records} records came more than "
                      f"{result.config.reorder_s:.0f} s behind newer ones (the file is not time-sorted and has "
                      "malformed lines, so it was read line by line); sort it by arrival first[/red]")
        return 2
    for warning in result.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    if plot is not None:
        write_plot(result, Path(plot))
    if json_out:
        sys.stdout.write(json.dumps(to_json(result), allow_nan=False) + "\n")
        sys.stdout.flush()
    else:
        print_tables(result, console)
        if plot is not None:
            console.print(f"plot written to {plot}")
    return 0


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 6)


def window_rows(result: TraceProfile) -> list[dict]:
    def length(t, value: float) -> float | None:  # an idle window has no lengths (not length 0)
        return value if t.profile.requests else None

    return [
        {"t_s": t.t, "requests": t.profile.requests, "prompt_p50": length(t, t.profile.prompt.p50),
         "prompt_p90": length(t, t.profile.prompt.p90), "output_p50": length(t, t.profile.output.p50),
         "output_p90": length(t, t.profile.output.p90), "arrival_rate": _finite(t.profile.arrival_rate),
         "burstiness": _finite(t.profile.burstiness), "prefix_hit_rate": _finite(t.profile.prefix_hit_rate),
         "concurrency": _finite(t.profile.concurrency)}
        for t in result.ticks
    ]


def to_json(result: TraceProfile) -> dict:
    def clean(obj):
        if isinstance(obj, float):
            return _finite(obj)
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [clean(v) for v in obj]
        return obj

    return clean({
        "trace": str(result.path),
        "records": result.records,
        "malformed": result.malformed,
        "errors": result.errors,
        "out_of_order": result.out_of_order,
        "late": result.late,
        "reordered": result.reordered,
        "rewinds": result.rewinds,
        "warnings": result.warnings,
        "seconds": result.seconds,
        "config": asdict(result.config),
        "changes": result.changes(),
        "drifts": [{"drift_id": d.drift_id, "t_s": d.t_s, "metrics": [c.metric for c in d.changes],
                    "buckets": [b.to_json() for b in d.current.buckets]} for d in result.drifts],
        "windows": window_rows(result),
        "profile": result.overall.to_json() if result.overall else None,
    })


def print_tables(result: TraceProfile, console: Console) -> None:
    title = f"{result.path.name}: {result.records} records, {result.malformed} malformed"
    # two-line headers, no vertical rules: the nine columns fit an 80-column terminal whole
    windows = _compact_table(title + " (one row per minute of trace time)")
    for col in ("t\n(min)", "requests", "prompt\np50", "prompt\np90", "output\np50", "req/s", "burst-\niness",
                "hit\nrate", "concur-\nrency"):
        windows.add_column(col, justify="right", no_wrap=True)
    per_minute = max(1, round(60 / result.config.step_s))
    for t in (t for t in result.ticks if round(t.t / result.config.step_s) % per_minute == 0):
        p = t.profile
        windows.add_row(f"{t.t / 60:.1f}", str(p.requests), f"{p.prompt.p50:.0f}", f"{p.prompt.p90:.0f}",
                        f"{p.output.p50:.0f}", f"{p.arrival_rate:.2f}", f"{p.burstiness:.1f}",
                        "-" if p.prefix_hit_rate is None else f"{p.prefix_hit_rate:.2f}", f"{p.concurrency:.1f}")
    console.print(windows)
    changes = _compact_table("detected changes")
    for col in ("t (s)", "since (s)", "metric", "before", "after", "KS", "PSI", "drift"):
        changes.add_column(col, justify="right", no_wrap=True)
    for c in result.changes():
        shape = c["metric"] in LENGTHS  # KS and PSI compare length distributions only
        changes.add_row(f"{c['t_s']:.0f}", f"{c['since_s']:.0f}", c["metric"], f"{c['before']:.3g}",
                        f"{c['after']:.3g}", f"{c['ks']:.2f}" if shape else "-", f"{c['psi']:.2f}" if shape else "-",
                        c["drift_id"][:8])
    console.print(changes if result.drifts else "[green]no drift detected[/green]")
    for error in result.errors[:5]:
        console.print(f"[yellow]malformed: {error}[/yellow]")



def _compact_table(title: str) -> Table:
    """A table that fits 80 columns."""
    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)


def write_plot(result: TraceProfile, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = window_rows(result)
    minutes = [r["t_s"] / 60 for r in rows]
    panels: list[tuple[str, list[tuple[str, str, LineStyleType]], bool]] = [
        ("prompt tokens", [("p50", "prompt_p50", "-"), ("p90", "prompt_p90", ":")], True),
        ("output tokens", [("p50", "output_p50", "-"), ("p90", "output_p90", ":")], True),
        ("requests / s", [("rate", "arrival_rate", "-")], False),
        ("prefix hit rate", [("hit", "prefix_hit_rate", "-")], False),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 9), sharex=True)
    for ax, (label, series, log) in zip(axes, panels, strict=True):
        plotted = 0
        for name, key, style in series:
            values = [r[key] if r[key] is not None else float("nan") for r in rows]
            plotted += sum(1 for v in values if math.isfinite(v))
            ax.plot(minutes, values, style, color="black", label=name, linewidth=1)
        if not plotted:  # e.g. a trace without cached tokens or block hashes has no hit rate
            ax.text(0.5, 0.5, f"no {label} in this trace", transform=ax.transAxes, ha="center", va="center",
                    color="gray")
            ax.set_yticks([])
        elif log:
            ax.set_yscale("log")
        ax.set_ylabel(label)
        for change in result.changes():
            ax.axvline(change["t_s"] / 60, color=METRIC_COLOURS.get(change["metric"], "black"), alpha=0.6,
                       linestyle="--", linewidth=1)
    seen = sorted({c["metric"] for c in result.changes()})
    changes = [plt.Line2D([], [], color=METRIC_COLOURS.get(m, "black"), linestyle="--", label=f"change: {m}")
               for m in seen]
    styles = [plt.Line2D([], [], color="black", linestyle=style, label=name) for name, _, style in panels[0][1]]
    axes[0].legend(handles=styles + changes, loc="upper left", fontsize=8)
    axes[-1].set_xlabel("trace time (minutes)")
    events = len(result.drifts)
    fig.suptitle(f"{result.path.name}: {result.config.window_s:.0f} s windows, "
                 f"{events} drift event{'' if events == 1 else 's'}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
