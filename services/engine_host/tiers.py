"""One tier = one worker process + what it should hold, so a dead worker comes back the same.

Calls are serialised per worker with an asyncio.Lock and the blocking pipe wait runs in a thread, so
the event loop (JetStream heartbeats, gRPC) stays live while a candidate runs. When a worker
crashes or hangs, the tier restarts it (weights re-created from the seed), re-installs every
incumbent in the order it was installed, counts the restart and times the start.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.log import get_logger
from services.engine_host.worker import WorkerFailure, WorkerHandle, WorkerSpec

log = get_logger("engine_host.tiers")


class Tier:
    def __init__(self, name: str, spec: WorkerSpec, start_timeout_s: float) -> None:
        self.name = name
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        self.handle = WorkerHandle(spec, start_timeout_s)
        self.lock = asyncio.Lock()
        self.installed: dict[str, ev.Candidate] = {}  # slot → non-reference op the table should hold
        self.restarts = 0
        self.last_failure = ""
        self._info: dict[str, Any] = {}

    @property
    def info(self) -> dict[str, Any]:
        """What the worker reported at its last start (kept while a restart is under way)."""
        if self.handle.info:
            self._info = self.handle.info
        return self._info

    @property
    def alive(self) -> bool:
        return self.handle.alive

    @property
    def start_s(self) -> float:
        return self.handle.start_s

    def slot_ids(self) -> dict[str, str]:
        ids = dict.fromkeys(self.info.get("slots", {}), "reference")
        ids.update({slot: c.candidate_id for slot, c in self.installed.items()})
        return ids

    async def start(self) -> None:
        seconds = await asyncio.to_thread(self.handle.start)
        log.info("worker started", tier=self.name, seconds=round(seconds, 2), pid=self.handle.process.pid)

    async def stop(self) -> None:
        await asyncio.to_thread(self.handle.stop)

    async def call(self, command: str, timeout_s: float, **kwargs: Any) -> Any:
        """Run a worker command. On a crash or hang: restart, then re-raise the WorkerFailure."""
        async with self.lock:
            if not self.handle.alive:
                await self._restart("worker found dead")
            try:
                return await asyncio.to_thread(self.handle.call, command, timeout_s, **kwargs)
            except WorkerFailure as failure:
                self.last_failure = failure.reason
                await self._restart(failure.reason)
                raise

    async def _restart(self, reason: str) -> None:
        self.handle.kill()
        self.restarts += 1
        log.warning("restarting worker", tier=self.name, reason=reason, restarts=self.restarts)
        self.handle = WorkerHandle(self.spec, self.start_timeout_s)
        await asyncio.to_thread(self._start_and_reinstall)
        log.info("worker restarted", tier=self.name, seconds=round(self.handle.start_s, 2))

    def _start_and_reinstall(self) -> None:
        began = time.perf_counter()
        self.handle.start()
        for slot, cand in list(self.installed.items()):
            try:
                result = self.handle.call("swap", self.start_timeout_s, source=cand.source, slot=slot,
                                          candidate_id=cand.candidate_id)
            except WorkerFailure as failure:  # the incumbent itself kills the worker: drop it
                log.error("incumbent crashed the worker on re-install; dropped", tier=self.name, slot=slot,
                          candidate_id=cand.candidate_id, reason=failure.reason)
                self.installed.pop(slot, None)
                self.handle.start()
                continue
            if result["status"] != "OK":
                log.error("incumbent failed to re-install; dropped", tier=self.name, slot=slot,
                          candidate_id=cand.candidate_id, error=result.get("error"))
                self.installed.pop(slot, None)
        self.handle.start_s = time.perf_counter() - began  # the restart as a whole: start + re-install
