"""Engine worker processes: candidate code never runs in the service process.

A worker is a 'spawn'ed process that holds one tier's model and slot table and answers commands on
a Pipe. The host side (`WorkerHandle`, blocking; the engine calls it from a thread) sends a command
and waits: a reply ends the wait, a progress note from the worker extends the deadline, a dead
process is CRASHED (with its signal), no progress within the timeout is TIMEOUT (the process is
killed). Restarting and re-installing incumbents is the engine's job (tiers.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from services.common.log import get_logger
from services.engine_host.gpu_faults import DEVICE_FAULT_EXIT, probe_device

log = get_logger("engine_host.worker")


RawShape = tuple[str, int, int, float]  # (phase, batch, context, weight)


@dataclass(frozen=True)
class WorkerSpec:
    tier: str
    model: str
    n_layers: int | None  # None: the whole model
    seed: int
    device: str  # "auto", "cpu", "cuda", "cuda:1", ...
    data_dir: str
    max_batch: int = 32
    max_tokens: int = 1024
    max_shapes: int = 4
    threads: int = 1
    rounds: int = 10
    samples: int = 5
    target_sample_s: float = 2e-3
    noise_floor: float = 0.01
    input_sets: int = 3
    capture_shapes: tuple[RawShape, ...] = ()
    capture_per_slot: int = 8
    graphs: bool = True  # CUDA graphs per batch bucket for decode steps (CUDA only; the CPU stays eager)
    warm_buckets: tuple[int, ...] = ()  # buckets captured at start, each followed by one decode step
    max_seq: int = 0  # static KV cache length; 0: the model's own maximum
    checkpoint: str = ""  # a safetensors file with real weights; empty: seeded random weights


class WorkerFailure(Exception):
    """The worker died (CRASHED) or stopped making progress (TIMEOUT); it is gone now."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class WorkerError(Exception):
    """The worker is fine but rejected the command (a bad request, not a candidate failure)."""


def _child_main(conn: Connection, spec: WorkerSpec) -> None:
    # Before torch, Triton or any candidate is imported: candidates' @triton.jit must see these.
    data_dir = Path(spec.data_dir)
    if spec.device == "cpu" or (spec.device == "auto" and not Path("/dev/nvidia0").exists()):
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(data_dir / "inductor-cache")
    os.environ.setdefault("TRITON_CACHE_DIR", str(data_dir / "triton-cache"))
    import torch

    torch.set_num_threads(spec.threads)  # fixed threads: stable CPU timing, no oversubscription
    if os.environ.get("TRITON_INTERPRET") != "1":
        # the Triton backend is part of a GPU engine's start, not of the first candidate's swap
        with contextlib.suppress(ImportError):
            import triton  # noqa: F401
    from services.engine_host.runtime import Runtime

    def progress(note: str) -> None:
        conn.send(("progress", note))

    try:
        with torch.inference_mode():
            runtime = Runtime(spec, progress)
    except Exception:
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready", runtime.info()))
    while True:
        try:
            command, kwargs = conn.recv()
        except (EOFError, OSError):
            return  # the host went away
        if command == "exit":
            return
        torch.set_num_threads(spec.threads)  # a candidate may have changed it
        try:
            with torch.inference_mode():
                result = getattr(runtime, command)(**kwargs)
        except Exception as exc:
            result, error = None, f"{type(exc).__name__}: {exc}"
        else:
            error = ""
        # a device fault (illegal address, ...) leaves the CUDA context dead: leave, the host restarts us
        if probe_device():
            os._exit(DEVICE_FAULT_EXIT)
        conn.send(("error", error) if error else ("ok", result))


def _death(exitcode: int | None) -> str:
    if exitcode is None:
        return "worker stopped answering"
    if exitcode == DEVICE_FAULT_EXIT:
        return "worker left after a device fault (CUDA context lost)"
    if exitcode < 0:
        try:
            return f"worker killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker exited with code {exitcode}"


@dataclass
class WorkerHandle:
    spec: WorkerSpec
    start_timeout_s: float = 300.0
    process: Any = None
    conn: Connection | None = None
    info: dict[str, Any] | None = None
    start_s: float = 0.0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def start(self) -> float:
        """Spawn the worker and wait until its model is built; returns the seconds it took."""
        began = time.perf_counter()
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_child_main, args=(child, self.spec), daemon=True,
                                   name=f"engine-worker-{self.spec.tier}")
        self.process.start()
        child.close()
        self.conn = parent
        kind, payload = self._wait("start", self.start_timeout_s, extend_on_progress=True)
        if kind == "fatal":
            self.stop()
            raise RuntimeError(f"engine worker ({self.spec.tier}) failed to start:\n{payload}")
        self.info = payload
        self.start_s = time.perf_counter() - began
        return self.start_s

    def call(self, command: str, timeout_s: float, **kwargs: Any) -> Any:
        """Run a command; WorkerFailure if the worker dies or hangs, WorkerError if it refuses."""
        if not self.alive or self.conn is None:
            raise WorkerFailure("CRASHED", _death(self.process.exitcode if self.process else None))
        try:
            self.conn.send((command, kwargs))
        except (BrokenPipeError, OSError) as exc:
            self.kill()
            raise WorkerFailure("CRASHED", f"{_death(self.process.exitcode)} ({exc})") from exc
        kind, payload = self._wait(command, timeout_s, extend_on_progress=True)
        if kind == "error":
            raise WorkerError(payload)
        return payload

    def _wait(self, command: str, timeout_s: float, extend_on_progress: bool) -> tuple[str, Any]:
        assert self.conn is not None and self.process is not None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerFailure("TIMEOUT", f"no progress for {timeout_s:g} s during {command}; "
                                               "worker killed")
            try:
                ready = self.conn.poll(min(remaining, 0.25))
                message = self.conn.recv() if ready else None
            except (EOFError, OSError):
                self.process.join(5)
                code = self.process.exitcode
                self.kill()
                raise WorkerFailure("CRASHED", f"{_death(code)} during {command}") from None
            if message is None:
                if not self.process.is_alive():
                    code = self.process.exitcode
                    self.kill()
                    raise WorkerFailure("CRASHED", f"{_death(code)} during {command}")
                continue
            kind, payload = message
            if kind == "progress":
                if extend_on_progress:
                    deadline = time.monotonic() + timeout_s
                continue
            return kind, payload

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(10)
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not."""
        if self.alive and self.conn is not None:
            try:
                self.conn.send(("exit", {}))
                self.process.join(timeout_s)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
