"""Which sandbox containment measures a machine's accelerator tolerates: run on a new GPU box once.

For each combination (every measure on, then each switched off alone, then none) a sandbox-like child
confines itself, initialises the device, receives a tensor shared by the parent (CUDA IPC on a GPU,
shared memory on a CPU) and writes into it; the table says which combinations work.

    python3 benchmarks/sandbox_probe.py [--device cuda]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.engine_host.containment import MEASURES, Confinement, confine  # noqa: E402


def _child(conn: Any, confinement: Confinement, device: str) -> None:
    try:
        measures = confine(confinement)
        import torch
        import torch.multiprocessing

        if device == "cuda":
            torch.cuda.init()
        local = torch.ones(4, device=device)
        shared = conn.recv()
        shared.add_(local)
        if device == "cuda":
            torch.cuda.synchronize()
        conn.send(("ok", measures))
    except Exception:
        conn.send(("failed", traceback.format_exc()[-600:]))


def probe(device: str, skip: tuple[str, ...]) -> tuple[str, Any]:
    import torch
    import torch.multiprocessing

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    work = tempfile.mkdtemp(prefix="probe-")
    proc = ctx.Process(target=_child, args=(child, Confinement(work, skip=skip), device))
    proc.start()
    t = torch.zeros(4, device=device)
    parent.send(t)
    if not parent.poll(120):
        proc.kill()
        return "timeout", ""
    status, detail = parent.recv()
    proc.join(10)
    if status == "ok" and device == "cuda":
        torch.cuda.synchronize()
    if status == "ok" and not bool((t == 1).all()):
        return "failed", "the child's write did not reach the parent's tensor"
    return status, detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    combos = [(), *((m,) for m in MEASURES), MEASURES]
    for skip in combos:
        status, detail = probe(a.device, skip)
        label = "every measure on" if not skip else ("none" if skip == MEASURES else f"without {skip[0]}")
        print(f"{label:32s} {status}", flush=True)
        if status != "ok":
            print("   " + str(detail).strip().splitlines()[-1][:300], flush=True)


if __name__ == "__main__":
    main()
