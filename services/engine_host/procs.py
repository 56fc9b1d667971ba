"""A spawned child process that answers typed commands on a pipe (harnesses and sandboxes alike).

The parent side blocks (callers run it in a thread): it sends one protocol message and waits. A
Reply ends the wait, a Progress note extends the deadline, Refused is a bad request (ChildRefused), a
dead process is CRASHED (with its signal) and no progress within the timeout is TIMEOUT (the process
is killed). Both failures raise ChildFailure; the child is gone afterwards. Tensors in a command
travel shared (not copied) when the sender imported torch.multiprocessing (harness, sandbox).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
import types
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from services.engine_host.gpu_faults import DEVICE_FAULT_EXIT
from services.engine_host.protocol import Fatal, Progress, Ready, Refused, Reply, Status


class ChildFailure(Exception):
    """The child died (CRASHED) or stopped making progress (TIMEOUT); it is gone now."""

    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class ChildRefused(Exception):
    """The child is fine but refused the command (a bad request, not a candidate failure)."""


class ChildStartError(RuntimeError):
    """The child could not start (its own error text attached)."""


def death(exitcode: int | None) -> str:
    if exitcode is None:
        return "process stopped answering"
    if exitcode == DEVICE_FAULT_EXIT:
        return "process left after a device fault (CUDA context lost)"
    if exitcode < 0:
        try:
            return f"process killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"process killed by signal {-exitcode}"
    return f"process exited with code {exitcode}"


class Child:
    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], name: str, daemon: bool = True,
                 context: Any = None, own_authkey: bool = False) -> None:
        self.target, self.args, self.name, self.daemon = target, args, name, daemon
        self.context = context  # a multiprocessing context; None: spawn
        # a child that must not authenticate to its parent's multiprocessing listeners (a sandbox)
        self.own_authkey = own_authkey
        self.process: Any = None
        self.conn: Connection | None = None
        self.ready: Any = None
        self.start_s = 0.0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    @property
    def pid(self) -> int:
        return int(self.process.pid) if self.process is not None else -1

    def launch(self) -> None:
        """Spawn without waiting for it to be ready (`wait_ready` does). Call it from a thread that
        outlives the child: a child that dies with its parent (PR_SET_PDEATHSIG) follows the thread
        that started it."""
        self._began = time.perf_counter()
        ctx = self.context or mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=self.target, args=(child, *self.args), daemon=self.daemon, name=self.name)
        if self.own_authkey:
            self.process.authkey = os.urandom(32)
            # nor re-run our __main__ before its target (what spawn and forkserver children do first)
            main, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
            try:
                self.process.start()
            finally:
                sys.modules["__main__"] = main
        else:
            self.process.start()
        child.close()
        self.conn = parent

    def wait_ready(self, timeout_s: float) -> Any:
        message = self._wait("start", timeout_s)
        if isinstance(message, Fatal):
            self.kill()
            raise ChildStartError(f"{self.name} failed to start:\n{message.text}")
        if not isinstance(message, Ready):
            self.kill()
            raise ChildStartError(f"{self.name} sent {type(message).__name__} before it was ready")
        self.ready = message.info
        self.start_s = time.perf_counter() - self._began
        return self.ready

    def start(self, timeout_s: float) -> Any:
        self.launch()
        return self.wait_ready(timeout_s)

    def call(self, command: Any, timeout_s: float) -> Any:
        """Send one command; its result, or ChildFailure / ChildRefused."""
        if not self.alive or self.conn is None:
            raise ChildFailure(Status.CRASHED, death(self.process.exitcode if self.process else None))
        try:
            self.conn.send(command)
        except (BrokenPipeError, OSError) as exc:
            self.kill()
            raise ChildFailure(Status.CRASHED, f"{death(self.process.exitcode)} ({exc})") from exc
        message = self._wait(type(command).__name__, timeout_s)
        if isinstance(message, Refused):
            raise ChildRefused(message.error)
        if not isinstance(message, Reply):
            self.kill()
            raise ChildFailure(Status.CRASHED, f"{self.name} answered {type(message).__name__}")
        return message.result

    def _wait(self, what: str, timeout_s: float) -> Any:
        assert self.conn is not None and self.process is not None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ChildFailure(Status.TIMEOUT, f"no progress for {timeout_s:g} s during {what}; killed")
            try:
                message = self.conn.recv() if self.conn.poll(min(remaining, 0.25)) else None
            except (EOFError, OSError):
                self.process.join(5)
                code = self.process.exitcode
                self.kill()
                raise ChildFailure(Status.CRASHED, f"{death(code)} during {what}") from None
            except Exception as exc:  # an unpicklable answer: the child is not speaking the protocol
                self.kill()
                raise ChildFailure(Status.CRASHED, f"undecodable answer during {what}: {exc}") from exc
            if message is None:
                if not self.process.is_alive():
                    code = self.process.exitcode
                    self.kill()
                    raise ChildFailure(Status.CRASHED, f"{death(code)} during {what}")
                continue
            if isinstance(message, Progress):
                deadline = time.monotonic() + timeout_s
                continue
            return message

    def kill(self) -> None:
        if self.process is None or self.process.pid is None:  # never started (or it failed to)
            self.process = None
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(10)
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def stop(self, command: Any, timeout_s: float = 10.0) -> None:
        """Ask the child to exit (`command`, an Exit); kill it if it does not."""
        if self.alive and self.conn is not None:
            try:
                self.conn.send(command)
                self.process.join(timeout_s)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
