"""The harness: one per tier. It holds the model's weights, the reference implementations, the input
generation, the comparison, the clock and the report, and it never imports candidate code.

Candidate code runs only in its sandboxes (sandbox.py): a fresh one per candidate from a warm pool,
and one long-lived live engine that loads nothing but kernels that passed (Install). The harness's
own model runs reference ops only: it captures inputs from real forward passes and produces the
reference generation for end-to-end checks. Three copies of the weights exist: the harness's own
(never shared), the live engine's, and one that candidate sandboxes share (checked bit for bit
after every candidate that attached it, and restored if written).
"""

from __future__ import annotations

import os
import sys
import traceback
import types
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from services.engine_host.containment import harden_harness
from services.engine_host.gpu_faults import DEVICE_FAULT_EXIT, probe_device
from services.engine_host.protocol import Exit, Fatal, HarnessSpec, Progress, Ready, Refused, Reply


def harness_main(conn: Connection, spec: HarnessSpec) -> None:
    harden_harness()
    # spawned sandboxes re-run the parent's __main__ before their target (multiprocessing's spawn):
    # give them none, so the first thing a sandbox runs is its own confinement
    sys.modules["__main__"] = types.ModuleType("__main__")
    data_dir = Path(spec.data_dir)
    if spec.device == "cpu" or (spec.device == "auto" and not Path("/dev/nvidia0").exists()):
        os.environ["TRITON_INTERPRET"] = "1"  # inherited by the sandboxes it spawns
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(data_dir / "inductor-cache")

    def progress(note: str) -> None:
        conn.send(Progress(note))

    try:
        import torch
        import torch.multiprocessing

        from services.engine_host.harness_core import Harness

        torch.set_num_threads(spec.threads)
        with torch.inference_mode():
            harness = Harness(spec, progress)
    except Exception:
        conn.send(Fatal(traceback.format_exc()))
        return
    conn.send(Ready(harness.info()))
    try:
        _serve(conn, harness, torch)
    finally:
        harness.close()


def _serve(conn: Connection, harness: Any, torch: Any) -> None:
    while True:
        try:
            command = conn.recv()
        except (EOFError, OSError):
            return  # the host went away
        if isinstance(command, Exit):
            return
        try:
            with torch.inference_mode():
                message: Reply | Refused = Reply(harness.handle(command))
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:
            message = Refused(f"{type(exc).__name__}: {exc}")
        if probe_device():  # the harness never runs candidate code: a fault here is the device's
            os._exit(DEVICE_FAULT_EXIT)
        if torch.cuda.is_initialized():
            # both tiers, their sandboxes and the live engine share one device: what a command's buffers
            # took goes back to it, not into this process's cache until the next command (the other
            # tier ran out of memory beside a harness that kept its peak)
            torch.cuda.empty_cache()
        conn.send(message)

