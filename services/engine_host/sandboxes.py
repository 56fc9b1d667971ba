"""The harness's side of its sandboxes: spawn, confine, freeze while the other side is timed, kill.

A `Sandbox` is one spawned sandbox process (sandbox.py) with a private working directory. It and
everything it forks (its descendants, its session, and orphans the harness adopted as subreaper) are
frozen together (SIGSTOP while the other side is timed: a candidate's spinning threads or children
cannot slow its rival) and killed together. The `SandboxPool` keeps spawned, confined sandboxes warm
(torch imported, device initialised), so a candidate's sandbox is ready when it arrives; each serves one candidate only.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing import forkserver, resource_tracker
from multiprocessing import util as mp_util
from pathlib import Path
from typing import Any

from services.common.log import get_logger
from services.engine_host.containment import (
    Confinement,
    children,
    cpu_seconds,
    family,
    forks_so_far,
    signal_all,
    signal_pids,
    wait_stopped,
)
from services.engine_host.ipc_refs import SentCounters
from services.engine_host.procs import Child
from services.engine_host.protocol import Calls, Exit, SandboxSpec
from services.engine_host.sandbox import sandbox_main

log = get_logger("engine_host.sandboxes")


@dataclass(frozen=True)
class SandboxSettings:
    device: str
    threads: int
    root: str  # working directories live below this (one per sandbox, removed with it)
    start_timeout_s: float = 300.0
    pool: int = 1  # warm sandboxes kept ready
    relax: tuple[str, ...] = ()  # containment measures switched off by configuration
    jit_timeout_s: float = 180.0  # a Triton or torch.compile candidate's first call may compile this long


_SANDBOX_PIDS: set[int] = set()  # every sandbox this process started and has not closed
_CONTEXT: Any = None
# Every harness on the machine keeps its multiprocessing sockets (the fork server's above all) below
# this root, and every sandbox hides the whole root: no sandbox reaches any harness's fork server.
MP_ROOT = Path("/tmp/polymorph-mp")


def sandbox_context() -> Any:
    """Sandboxes are forked from a fork server that imported torch and the sandbox's own code once and
    never ran anything else (multiprocessing's forkserver): a new sandbox costs a fork, not an
    interpreter start and a torch import. The server initialises no device: each child does that
    itself, after it confined itself. Its listening socket lives below MP_ROOT, which every sandbox
    hides behind an empty tmpfs in its own mount namespace (containment.py), and without capabilities
    no sandbox can take the path through another process's /proc/<pid>/root: a sandbox cannot ask a
    fork server for an unconfined process."""
    global _CONTEXT
    if _CONTEXT is None:
        MP_ROOT.mkdir(mode=0o700, exist_ok=True)
        tempdir = tempfile.mkdtemp(prefix="pymp-", dir=MP_ROOT)
        mp_util.Finalize(None, shutil.rmtree, args=[tempdir, True], exitpriority=-100)
        mp.process.current_process()._config["tempdir"] = tempdir  # type: ignore[attr-defined]  # its sockets go here
        _CONTEXT = mp.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["services.engine_host.forkserver_guard", "torch",
                                         "services.engine_host.sandbox", "services.engine_host.sandbox_server"])
    return _CONTEXT


_LAUNCH = threading.Lock()  # a sandbox being launched is registered before anyone looks for strays


def stray_children() -> set[int]:
    """Children of this process that are no sandbox of ours: orphans a sandbox left (we are their
    subreaper) — never multiprocessing's own helpers."""
    with _LAUNCH:
        return _strays()


def _strays() -> set[int]:
    ours = set(_SANDBOX_PIDS)
    helpers = {getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None),
               getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)}
    return {p for p in children(os.getpid())
            if p not in ours and p not in helpers and not _is_shm_manager(Path(f"/proc/{p}"))}


def _is_shm_manager(proc: Path) -> bool:
    """torch's shared-memory manager (started by this process when it first shares a CPU tensor by
    name): told by the binary it runs, which an orphan can only match by becoming one."""
    try:
        return os.readlink(proc / "exe").endswith("/torch_shm_manager")
    except OSError:
        return False


class Sandbox:
    _serial = itertools.count()

    def __init__(self, settings: SandboxSettings, label: str) -> None:
        n = next(self._serial)
        self.label = label
        self.work_dir = Path(settings.root) / f"{os.getpid()}-{n}"
        confinement = Confinement(str(self.work_dir), threads=settings.threads, skip=settings.relax,
                                  hide=(str(MP_ROOT),))
        spec = SandboxSpec(settings.device, settings.threads, confinement, label)
        self.child = Child(sandbox_main, (spec,), f"sandbox-{label}-{n}", context=sandbox_context(),
                           own_authkey=True)
        self.jit_timeout_s = settings.jit_timeout_s
        self.measures: dict[str, str] = {}
        self.model_attached = False
        self.jit_pending = False  # the next Calls may JIT-compile the kernel (Triton, torch.compile)
        self.caches: tuple[Any, ...] = ()  # KV caches the harness allocated for its model (kept alive here)
        self.frozen = False
        self._stopped: list[int] = []
        self._walked_at = -2  # the fork counter when the family was last walked (never: matches nothing)
        self._unsettled: int | None = None  # SIGSTOP sent, not yet seen taken: the fork counter then
        self.call_s = 0.0  # wall seconds the harness has waited on its answers
        self.sent = SentCounters()  # CUDA blocks shared with it: given back once it has exited
        self._reaper: threading.Thread | None = None  # a close that did not wait: reaps it in the background

    def launch(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with _LAUNCH:
            self.child.launch()
            _SANDBOX_PIDS.add(self.child.pid)

    def wait_ready(self, timeout_s: float) -> None:
        self.measures = self.child.wait_ready(timeout_s)

    def call(self, command: Any, timeout_s: float) -> Any:
        self.thaw()  # a frozen sandbox answers nothing; thawing here keeps SIGCONT inside a timed window
        if isinstance(command, Calls) and self.jit_pending:
            # its first call compiles (a cold torch.compile takes ~20 s on a CPU): a longer allowance,
            # once; the backend is the candidate's own word, so lying only changes how long its hang lasts
            self.jit_pending = False
            timeout_s = max(timeout_s, self.jit_timeout_s)
        began = time.perf_counter()
        try:
            with self.sent.recording():
                return self.child.call(command, timeout_s)
        finally:
            self.call_s += time.perf_counter() - began

    def cpu_s(self) -> float:
        """CPU seconds it and everything it spawned have used so far."""
        return cpu_seconds(family(self.child.pid, stray_children()) or [self.child.pid])

    @property
    def alive(self) -> bool:
        return self.child.alive

    def freeze(self, wait: bool = True) -> None:
        """Stop it and everything it spawned; with `wait`, return only once every thread has stopped
        (else `settle()` does that later: the stop then overlaps the caller's own work). The family is
        walked through /proc again only when something was created on the machine since the last walk
        (the kernel's fork counter moved): the harness freezes each side once per sample."""
        if self.frozen or not self.child.alive:
            if wait:
                self.settle()
            return
        before = forks_so_far()
        if before >= 0 and before == self._walked_at:
            signal_pids(self._stopped, signal.SIGSTOP)
            self.frozen, self._unsettled = True, before
            if wait:
                self.settle()
            return
        self._walk(set())

    def settle(self) -> None:
        """Until every thread of a family sent SIGSTOP has stopped (after this none is inside a fork, so
        the fork counter is final); walks again if something was created meanwhile."""
        if self._unsettled is None:
            return
        before, self._unsettled = self._unsettled, None
        if not wait_stopped(self._stopped):
            log.warning("a frozen sandbox still had running threads", pids=self._stopped)
        if forks_so_far() != before:
            self._walk(set(self._stopped))

    def _walk(self, stopped: set[int]) -> None:
        """Walk the family through /proc, stopping what is new, until a walk finds nothing new (a
        process may fork between a walk and its SIGSTOP)."""
        while True:
            mark = forks_so_far()
            fresh = set(family(self.child.pid, stray_children()) or [self.child.pid]) - stopped
            if not fresh:
                break
            signal_pids(fresh, signal.SIGSTOP)
            stopped |= fresh
            if not wait_stopped(sorted(stopped)):
                log.warning("a frozen sandbox still had running threads", pids=sorted(stopped))
        self._walked_at = mark
        self._stopped = sorted(stopped)
        self.frozen = True

    def thaw(self) -> None:
        """SIGCONT to exactly what freeze stopped (a stopped family cannot have grown): a few kill()s,
        no walk of /proc, so a thaw inside a timed window costs microseconds."""
        if self.frozen:
            signal_pids(self._stopped, signal.SIGCONT)
            self.frozen, self._unsettled = False, None

    def close(self, wait: bool = True) -> None:
        """Kill it and whatever it spawned; remove its working directory. Without `wait` the family is
        sent SIGKILL now and reaped in the background (a CUDA process's exit, the driver tearing its
        context down, takes ~0.1 s): only for a trusted sandbox, whose last writes nothing checks."""
        self.thaw()
        if self.child.alive and self.child.conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.child.conn.send(Exit())
        strays = stray_children()
        if self.child.process is not None:
            signal_all(self.child.pid, signal.SIGKILL, strays)
        if wait:
            self._reaped(strays)
        elif self._reaper is None:
            self._reaper = threading.Thread(target=self._reaped, args=(strays,), daemon=True, name="sandbox-reap")
            self._reaper.start()

    def wait_closed(self, timeout_s: float) -> bool:
        """After close(wait=False): until it has exited and what it held is given back; False on timeout."""
        if self._reaper is not None:
            self._reaper.join(timeout_s)
            return not self._reaper.is_alive()
        return not self.child.alive

    def _reaped(self, strays: set[int]) -> None:
        self.child.kill()
        _SANDBOX_PIDS.discard(self.child.pid)
        _reap(strays)
        if self.child.process is None or self.child.process.exitcode is not None:
            self.sent.release()
        shutil.rmtree(self.work_dir, ignore_errors=True)


def _reap(strays: set[int]) -> None:
    """Collect the orphans we adopted and killed (they would stay zombies). Only those: a wait on any
    child would steal the exit status multiprocessing needs for its own processes."""
    for pid in strays:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


class SandboxPool:
    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings
        self._ready: list[Sandbox] = []
        self._starting: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.measures: dict[str, str] = {}
        self.started = 0
        self.last_error = ""
        self.closing = False

    def _wait(self, box: Sandbox) -> None:
        try:
            box.wait_ready(self.settings.start_timeout_s)
        except Exception as exc:
            if not self.closing:
                log.error("sandbox failed to start", error=str(exc)[-2000:])
            box.close()
            with self._cond:
                self.last_error = str(exc)[-2000:]
                self._starting = [t for t in self._starting if t is not threading.current_thread()]
                self._cond.notify_all()
            return
        with self._cond:
            self.measures, self.last_error = box.measures, ""
            self._ready.append(box)
            self.started += 1
            self._starting = [t for t in self._starting if t is not threading.current_thread()]
            self._cond.notify_all()

    def _start_one(self) -> None:
        """Launch here (the harness's main thread: a sandbox dies with the thread that started it),
        wait for it to be ready in the background. Called with the lock held."""
        box = Sandbox(self.settings, "candidate")
        box.launch()
        t = threading.Thread(target=self._wait, args=(box,), daemon=True, name="sandbox-start")
        self._starting.append(t)
        t.start()

    def fill(self) -> None:
        """Start sandboxes until `pool` are ready or starting."""
        with self._cond:
            for _ in range(max(0, self.settings.pool - len(self._ready) - len(self._starting))):
                self._start_one()

    def take(self, label: str = "candidate") -> Sandbox:
        """A ready sandbox of its own for one candidate (waits for one to finish starting)."""
        with self._cond:
            while True:
                while self._ready:
                    box = self._ready.pop(0)
                    if box.alive:
                        box.label = label
                        return box
                    box.close()
                if not self._starting:
                    if self.last_error:
                        error, self.last_error = self.last_error, ""
                        raise RuntimeError(f"sandbox failed to start: {error}")
                    self._start_one()
                if not self._cond.wait(self.settings.start_timeout_s):
                    raise RuntimeError("no sandbox started within the start timeout")

    def spawn(self, label: str) -> Sandbox:
        """A sandbox outside the pool (the live engine), started now."""
        box = Sandbox(replace(self.settings), label)
        box.launch()
        box.wait_ready(self.settings.start_timeout_s)
        self.measures = self.measures or box.measures
        return box

    def close(self) -> None:
        with self._cond:
            self.closing = True
            boxes, self._ready = self._ready, []
        for box in boxes:
            box.close()
