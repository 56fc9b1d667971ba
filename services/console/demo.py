"""`polymorph demo`: the whole loop on this machine, driven by a real trace that contains a drift.

embedded stack up → replay the trace → the profiler fires traffic.drift → a campaign proposes
candidates → the engine host times them → the verifier checks the winners → the registry promotes.
Ends when the trace is replayed and every campaign it started has ended (budget spent, plateau,
exhausted) with nothing left to verify or store; the status line says what it still waits for. It
gives up only when nothing has moved (no candidate, benchmark, verdict, campaign state or stored
message) for `stall_s`: a busy machine only makes it slower. Exits 0 only if a kernel was promoted.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects, tls
from services.console import client, progress
from services.console.live import progress_table
from services.console.stack import Stack
from services.console.term import make_console

console = make_console()


@dataclass(frozen=True)
class DemoOptions:
    data_dir: Path
    trace: Path
    speed: float
    stall_s: float  # give up after this long without any progress
    summary_json: Path | None


class DemoFailed(RuntimeError):
    pass


async def wait_ready(url: str, stack: Stack, timeout_s: float = 180.0) -> None:
    """Ready = the registry answers SQL and an engine host answers discovery."""
    import nats

    deadline = time.monotonic() + timeout_s
    while True:  # a just-restarted nats-server may not accept yet: its JetStream store recovers first
        try:
            nc = await nats.connect(url, **tls.nats_options())
            break
        except (OSError, nats.errors.NoServersError, TimeoutError):
            _raise_if_dead(stack)
            if time.monotonic() > deadline:
                raise DemoFailed(f"the nats-server at the stack's port did not accept in {timeout_s:.0f}s") from None
            await asyncio.sleep(0.5)
    try:
        pending = {"registry": subjects.REGISTRY_SQL, "engine_host": subjects.ENGINE_DISCOVER}
        payloads = {"registry": ev.SqlRequest(query="select 1").SerializeToString(),
                    "engine_host": ev.DiscoverRequest().SerializeToString()}
        while pending:
            _raise_if_dead(stack)
            if time.monotonic() > deadline:
                raise DemoFailed(f"services not ready after {timeout_s:.0f}s: {sorted(pending)}")
            for name, subject in list(pending.items()):
                try:
                    await nc.request(subject, payloads[name], timeout=2)
                    del pending[name]
                except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                    pass
            await asyncio.sleep(0.5)
    finally:
        await nc.close()


def _raise_if_dead(stack: Stack) -> None:
    dead = stack.dead_services()
    if dead:
        name = next(iter(dead))
        tail = (stack.log_dir / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
        raise DemoFailed(f"service {name} exited with {dead[name]}:\n" + "\n".join(tail))


def _status_line(phase: str, started: float) -> Spinner:
    return Spinner("dots", text=f"{phase}  ({time.monotonic() - started:.0f}s)")


async def _run_loop(options: DemoOptions, stack: Stack, started: float, live: Live) -> progress.Snapshot:
    from services.traffic_profiler.replay import replay_trace

    url = stack.nats_url
    live.update(_status_line("waiting for services", started))
    await wait_ready(url, stack)
    replay = asyncio.create_task(replay_trace(stack.url_for("traffic"), options.trace, options.speed, progress=False))
    replay_done_at: float | None = None
    last_move, seen = time.monotonic(), None
    while True:
        _raise_if_dead(stack)
        snap = await progress.snapshot(url)
        if replay.done():
            replay.result()  # surfaces a replay error
            replay_done_at = replay_done_at or time.monotonic()
            if not snap.campaigns and time.monotonic() - replay_done_at > 90:
                raise DemoFailed("the trace was replayed but no drift started a campaign")
        if (moved := _signature(snap, replay.done())) != seen:
            last_move, seen = time.monotonic(), moved
        waiting = waiting_for(snap, replay.done())
        if time.monotonic() - last_move > options.stall_s:
            raise DemoFailed(f"nothing moved for {options.stall_s:.0f}s while {waiting}")
        live.update(Group(_status_line(waiting, started), progress_table(snap)))
        if replay.done() and snap.settled:
            return snap
        await asyncio.sleep(2.0)


def _signature(snap: progress.Snapshot, replayed: bool) -> tuple:
    """What counts as progress: any of these changing."""
    return (replayed, tuple(sorted(snap.totals.items())), tuple((c["campaign_id"], c["state"], c["proposed"])
            for c in snap.campaigns), snap.pending_verification, snap.registry_backlog)


def waiting_for(snap: progress.Snapshot, replayed: bool) -> str:
    """Why the demo has not ended yet, in words."""
    if not replayed:
        return "replaying the trace"
    running = [c for c in snap.campaigns if c["state"] not in ("completed", "failed")]
    if not snap.campaigns:
        return "waiting for the profiler's drift"
    if running:
        proposed = sum(int(c["proposed"] or 0) for c in running)
        return f"{len(running)} campaign(s) running, {proposed} candidates proposed so far"
    if snap.pending_verification:
        return f"verifying {snap.pending_verification} winner(s)"
    if snap.registry_backlog:
        return f"the registry is storing {snap.registry_backlog} message(s)"
    return "finishing"


def summary_table(snap: progress.Snapshot) -> Table:
    table = progress_table(snap, title="polymorph demo: per-slot results")
    table.caption = None
    return table


def summary_dict(snap: progress.Snapshot, seconds: float) -> dict:
    totals = snap.totals
    return {
        "candidates": totals["candidates"],
        "benchmarked": totals["benchmarked"],
        "verified": totals["passed"],  # candidates that passed verification
        "promoted": [
            {"candidate_id": p["candidate_id"], "slot": p["slot"], "speedup": float(p["speedup"] or 0)}
            for p in snap.promoted
        ],
        "seconds": round(seconds, 1),
    }


async def run_demo(options: DemoOptions) -> int:
    if not options.trace.exists():
        console.print(f"[red]trace not found: {options.trace}[/red]")
        return 2
    shutil.rmtree(options.data_dir, ignore_errors=True)  # every demo starts from an empty registry
    started = time.monotonic()
    stack = Stack(options.data_dir)
    console.print(f"polymorph demo: trace {options.trace.name} at {options.speed:g}x, state in {options.data_dir}")
    snap: progress.Snapshot | None = None
    try:
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            live.update(_status_line("starting nats-server and five services", started))
            await asyncio.to_thread(stack.start)
            snap = await _run_loop(options, stack, started, live)
    except (DemoFailed, client.StackUnavailable) as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
        console.print(f"logs: {stack.log_dir}")
        return 1
    finally:
        await asyncio.to_thread(stack.stop)
    seconds = time.monotonic() - started
    console.print(summary_table(snap))
    summary = summary_dict(snap, seconds)
    for p in summary["promoted"]:
        console.print(f"promoted {p['slot']}: {p['candidate_id']} ({p['speedup']:.2f}x over its incumbent)")
    console.print(f"{summary['candidates']} candidates, {summary['benchmarked']} benchmarked, "
                  f"{summary['verified']} verified, {len(summary['promoted'])} promoted in {seconds:.0f}s")
    if options.summary_json:
        options.summary_json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if summary["promoted"] else 1
