"""`polymorph up` (embedded stack with live logs) and `polymorph status` (progress table)."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path

from rich.live import Live
from rich.table import Table

from services.common.identities import redact
from services.console import progress
from services.console.stack import Stack
from services.console.supervisor import GaveUp, Supervisor
from services.console.term import make_console

console = make_console()


def progress_table(snap: progress.Snapshot, title: str = "campaign progress") -> Table:
    table = Table(title=title)
    for col in ("slot", "step share", "headroom", "candidates", "benchmarked", "wins", "verified", "passed",
                "promoted", "best speedup"):
        table.add_column(col, justify="left" if col == "slot" else "right")
    for row in snap.per_slot:
        best, share, headroom = row["best_speedup"], row.get("step_share"), row.get("headroom")
        table.add_row(row["slot"] or "", f"{float(share):.0%}" if share else "-",
                      f"{float(headroom):.0%}" if headroom not in (None, "") else "-",
                      *(row[k] or "0" for k in ("candidates", "benchmarked", "wins", "verified", "passed", "promoted")),
                      f"{float(best):.2f}x" if best else "-")
    states = ", ".join(f"{c['campaign_id']}: {c['state']}" for c in snap.campaigns) or "no campaign yet"
    table.caption = (f"{states}; awaiting verification: {snap.pending_verification}; "
                     f"not yet stored by the registry: {snap.registry_backlog}")
    return table


async def run_status(url: str, watch: bool) -> int:
    if not watch:
        console.print(progress_table(await progress.snapshot(url)))
        return 0
    with Live(console=console, refresh_per_second=2) as live:
        while True:
            live.update(progress_table(await progress.snapshot(url)))
            await asyncio.sleep(2)


def _format_log_line(service: str, line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return f"[{service}] {line.rstrip()}"
    event = record.pop("event", "")
    level = record.pop("level", "info")
    record.pop("timestamp", None)
    extras = " ".join(f"{k}={v}" for k, v in record.items())
    return f"[{service}] {level:7} {event} {extras}".rstrip()


def follow_logs(log_dir: Path, stop: threading.Event) -> None:
    """Print every service's new log lines as they appear (a `tail -f` over the log folder); what the
    logs held before this start is not printed again."""
    offsets: dict[Path, int] = {path: path.stat().st_size for path in log_dir.glob("*.log")}
    while not stop.is_set():
        for path in sorted(log_dir.glob("*.log")):
            with open(path, errors="replace") as fh:
                fh.seek(offsets.get(path, 0))
                for line in fh:
                    console.print(_format_log_line(path.stem, line), markup=False, highlight=False)
                offsets[path] = fh.tell()
        stop.wait(0.5)


def run_up(data_dir: Path, port: int = 0) -> int:
    stack = Stack(data_dir, port=port)
    supervisor = Supervisor(stack)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stack.start()
    console.print(f"polymorph is up: NATS {redact(stack.nats_url)}, data in {data_dir}, logs in {stack.log_dir}; "
                  f"bus credentials (one per identity, mode 0600) in {stack.credentials_dir}")
    console.print("try: polymorph optimize --slots rope,rmsnorm   |   polymorph status --watch")
    tail = threading.Thread(target=follow_logs, args=(stack.log_dir, stop), daemon=True)
    tail.start()
    code = 0
    shown: dict[str, str] = {}
    try:
        while not stop.is_set():
            for name in supervisor.tick():
                console.print(f"restarted {name} (restart {supervisor.restarts[name]}); see {stack.log_dir}")
            for name, url in stack.endpoints().items():  # as each service comes up (a restart: a new port)
                if shown.get(name) != url:
                    what = "HTTP monitoring" if name == "nats-server" else "metrics"
                    console.print(f"{what}: {name} {url}", markup=False, highlight=False)
                    shown[name] = url
            time.sleep(0.5)
    except GaveUp as exc:
        console.print(f"giving up: {exc}; see {stack.log_dir}")
        code = 1
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        console.print("stopping...")
        stack.stop()
    return code
