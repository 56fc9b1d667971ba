"""The sandbox process: one candidate (or, for the live engine, only kernels that passed), nothing trusted.

It confines itself first (containment.py), then imports torch and answers the harness's commands
(sandbox_server.py): load candidates into its op table, attach a model built from tensors the harness
owns, run calls of an op on input sets the harness shared and copy each result into the harness's
output slabs, generate, run decode steps. It never times, compares or reports anything that decides
a verdict: the harness reads the buffers and keeps the clock. The same program serves as the live
engine, so a kernel cannot tell being checked from being served by the program it runs in.

Sandboxes are forked from a fork server (sandboxes.py) that imported torch and this code and ran
nothing else; the child confines itself before it touches the device or any candidate.
"""

from __future__ import annotations

import os
import traceback
from multiprocessing.connection import Connection

from services.engine_host.containment import confine
from services.engine_host.gpu_faults import DEVICE_FAULT_EXIT, probe_device
from services.engine_host.protocol import Calls, Exit, Fatal, Ready, Refused, Reply, SandboxSpec


def sandbox_main(conn: Connection, spec: SandboxSpec) -> None:
    try:
        measures = confine(spec.confinement)
    except Exception:
        conn.send(Fatal(traceback.format_exc()))
        return
    if spec.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before any Triton import: candidates' @triton.jit see it
    try:
        import torch
        import torch.multiprocessing

        from services.engine_host.ipc_refs import HeldStorages
        from services.engine_host.sandbox_server import SandboxServer
        from services.engine_host.warmup import warm_device

        torch.set_num_threads(spec.threads)
        server = SandboxServer(spec)
        warm_device(server.device)  # before Ready: a pooled sandbox pays Triton's start-up, not its candidate
    except Exception:
        conn.send(Fatal(traceback.format_exc()))
        return
    conn.send(Ready(measures))
    held = HeldStorages()  # what the harness shared stays held until this process dies (ipc_refs.py)
    while True:
        try:
            command = conn.recv()
        except (EOFError, OSError):
            return  # the harness went away
        if not isinstance(command, Calls):  # the timed command carries no tensors: not walked in the window
            held.keep(command)
        if isinstance(command, Exit):
            return
        torch.set_num_threads(spec.threads)  # a candidate may have changed it
        try:
            with torch.inference_mode():
                message: Reply | Refused = Reply(server.handle(command))
        except (ValueError, KeyError, TypeError) as exc:
            message = Refused(f"{type(exc).__name__}: {exc}")
        # a device fault leaves the CUDA context dead: leave, the harness replaces this sandbox
        if probe_device():
            os._exit(DEVICE_FAULT_EXIT)
        if not isinstance(command, Calls) and torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # the device is shared with the other tier (harness.py); never between timed calls
        conn.send(message)
