"""One tier = one harness process + the passed kernels its live engine should hold.

Calls are serialised per tier with an asyncio.Lock and the blocking pipe wait runs in a thread, so
the event loop (JetStream heartbeats, gRPC) stays live while a candidate runs. Candidate crashes and
hangs are contained below the harness (in sandboxes); should the harness itself die or hang, the tier
restarts it (weights re-created from the seed), re-installs every incumbent in the order it was
installed, counts the restart and times the start.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.log import get_logger
from services.engine_host.harness import harness_main
from services.engine_host.procs import Child, ChildFailure
from services.engine_host.protocol import CandidateCode, Exit, HarnessInfo, HarnessSpec, Install, Status

log = get_logger("engine_host.tiers")


def code_of(candidate: ev.Candidate) -> CandidateCode:
    return CandidateCode(candidate.candidate_id, candidate.slot, candidate.source)


class Tier:
    def __init__(self, name: str, spec: HarnessSpec, start_timeout_s: float) -> None:
        self.name = name
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        self.child = self._child()
        self.lock = asyncio.Lock()
        self.installed: dict[str, ev.Candidate] = {}  # op → non-reference kernel the live engine should hold
        self.restarts = 0
        self.last_failure = ""
        self._info: HarnessInfo | None = None

    def _child(self) -> Child:
        # not a daemon: a harness has children of its own (its sandboxes); it dies with the host anyway
        return Child(harness_main, (self.spec,), f"engine-harness-{self.name}", daemon=False)

    @property
    def info(self) -> HarnessInfo | None:
        """What the harness reported at its last start (kept while a restart is under way)."""
        if self.child.ready is not None:
            self._info = self.child.ready
        return self._info

    @property
    def alive(self) -> bool:
        return self.child.alive

    @property
    def start_s(self) -> float:
        return self.child.start_s

    def op_ids(self) -> dict[str, str]:
        info = self.info
        ids = dict.fromkeys(info.ops if info is not None else {}, "reference")
        ids.update({op: c.candidate_id for op, c in self.installed.items()})
        return ids

    async def start(self) -> None:
        self.child.launch()  # from the event loop's thread: the harness dies with the thread that started it
        await asyncio.to_thread(self.child.wait_ready, self.start_timeout_s)
        log.info("harness started", tier=self.name, seconds=round(self.child.start_s, 2), pid=self.child.pid)

    async def stop(self) -> None:
        await asyncio.to_thread(self.child.stop, Exit())

    async def call(self, command: Any, timeout_s: float) -> Any:
        """Run a harness command. If the harness itself dies or hangs: restart, then re-raise."""
        async with self.lock:
            if not self.child.alive:
                await self._restart("harness found dead")
            try:
                return await asyncio.to_thread(self.child.call, command, timeout_s)
            except ChildFailure as failure:
                self.last_failure = failure.reason
                await self._restart(failure.reason)
                raise

    async def _restart(self, reason: str) -> None:
        self.child.kill()
        self.restarts += 1
        log.warning("restarting harness", tier=self.name, reason=reason, restarts=self.restarts)
        began = time.perf_counter()
        self.child = self._child()
        self.child.launch()
        await asyncio.to_thread(self.child.wait_ready, self.start_timeout_s)
        await asyncio.to_thread(self._reinstall)
        self.child.start_s = time.perf_counter() - began  # the restart as a whole: start + re-install
        log.info("harness restarted", tier=self.name, seconds=round(self.child.start_s, 2))

    def _reinstall(self) -> None:
        for op, cand in list(self.installed.items()):
            try:
                report = self.child.call(Install(code_of(cand)), self.start_timeout_s)
            except ChildFailure as failure:  # the harness contains kernels: this is the harness failing
                log.error("harness failed re-installing an incumbent; dropped", tier=self.name, op=op,
                          candidate_id=cand.candidate_id, reason=failure.reason)
                self.installed.pop(op, None)
                return
            if report.status != Status.OK:
                log.error("incumbent failed to re-install; dropped", tier=self.name, op=op,
                          candidate_id=cand.candidate_id, error=report.error)
                self.installed.pop(op, None)
