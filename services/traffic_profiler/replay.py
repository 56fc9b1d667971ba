"""Replay a trace file onto `traffic.requests` at `speed` times real time.

Records keep their trace time in arrival_s (seconds since the trace's first record); only the
publishing is paced. speed <= 0 or inf publishes as fast as the bus acknowledges. Malformed lines
are counted and skipped, and a publish that fails twice is counted, never stopping the replay.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from services.common import subjects
from services.common.bus import Bus
from services.common.log import get_logger
from services.traffic_profiler.readers import ColumnMapping, read_trace
from services.traffic_profiler.records import Record

log = get_logger("traffic_replay")
IN_FLIGHT = 256  # publishes awaiting their JetStream ack at once


@dataclass
class ReplayStats:
    path: str
    speed: float
    records: int = 0          # parsed records
    published: int = 0        # acknowledged by JetStream
    duplicates: int = 0       # dropped by the stream's de-duplication
    failed: int = 0           # publishes that failed twice
    malformed: int = 0        # trace lines that did not parse
    errors: list[str] = field(default_factory=list)
    trace_s: float = 0.0      # trace time covered
    wall_s: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """What a person running `polymorph replay` wants to read at the end."""
        pace = f", x{self.trace_s / self.wall_s:,.0f} real time" if self.wall_s > 0 and self.trace_s > 0 else ""
        lines = [f"replayed {Path(self.path).name}: {self.records} records, {self.published} published, "
                 f"{self.duplicates} duplicates, {self.failed} failed, {self.malformed} malformed lines; "
                 f"{self.trace_s:.1f} s of trace time in {self.wall_s:.1f} s{pace}"]
        lines += [f"malformed: {error}" for error in self.errors[:5]]
        if len(self.errors) > 5:
            lines.append(f"... and {len(self.errors) - 5} more malformed lines")
        return "\n".join(lines)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


async def replay_trace(
    nats_url: str,
    path: Path,
    speed: float,
    *,
    limit: int | None = None,
    progress: bool = True,
    mapping: ColumnMapping | None = None,
) -> ReplayStats:
    """Publish the trace's records to traffic.requests; returns what was sent and what was skipped."""
    path = Path(path)
    bus = await Bus.connect(nats_url, "traffic-replay", manage_streams=False)
    try:
        return await _replay(bus, path, speed, limit, progress, mapping)
    finally:
        await bus.close()


async def _replay(bus: Bus, path: Path, speed: float, limit: int | None, progress: bool,
                  mapping: ColumnMapping | None) -> ReplayStats:
    stats = ReplayStats(path=str(path), speed=speed)
    paced = speed > 0 and math.isfinite(speed)
    run_id = uuid.uuid4().hex[:8]  # a replay run's own ids: a second replay is not a duplicate
    reader = read_trace(path, mapping, limit)
    total = _count_lines(path) if limit is None else limit
    bar = Progress(TextColumn("replay {task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("trace {task.fields[trace]:.0f}s"), TimeElapsedColumn(), disable=not progress)
    inflight: set[asyncio.Task] = set()
    start = time.monotonic()
    with bar:
        task = bar.add_task(path.name, total=total, trace=0.0)
        for index, record in enumerate(reader):
            if paced:
                delay = record.arrival_s / speed - (time.monotonic() - start)
                if delay > 0:
                    await asyncio.sleep(delay)
            if not record.request_id:
                record.request_id = f"{path.stem}:{index}"
            pending = asyncio.create_task(_publish(bus, record, f"{run_id}:{index}", stats))
            inflight.add(pending)
            pending.add_done_callback(inflight.discard)
            if len(inflight) >= IN_FLIGHT:
                await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            stats.trace_s = max(stats.trace_s, record.arrival_s)
            if index % 64 == 0:
                bar.update(task, completed=reader.lines, trace=stats.trace_s)
        if inflight:
            await asyncio.wait(inflight)
        bar.update(task, completed=reader.lines, total=reader.lines, trace=stats.trace_s)  # a header is no record
    stats.records, stats.malformed, stats.errors = reader.records, reader.malformed, reader.errors
    stats.wall_s = time.monotonic() - start
    log.info("replay finished", **{k: v for k, v in stats.to_json().items() if k != "errors"})
    return stats


async def _publish(bus: Bus, record: Record, msg_id: str, stats: ReplayStats) -> None:
    message = record.to_proto()
    for attempt in (1, 2):
        try:
            if await bus.publish(subjects.TRAFFIC_REQUESTS, message, msg_id=msg_id):
                stats.published += 1
            else:
                stats.duplicates += 1
            return
        except Exception as exc:  # a timeout or a reconnect: retry once, then count it and go on
            if attempt == 2:
                stats.failed += 1
                log.warning("publish failed", msg_id=msg_id, error=f"{type(exc).__name__}: {exc}")
            else:
                await asyncio.sleep(0.2)
