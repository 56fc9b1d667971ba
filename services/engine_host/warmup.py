"""Warm a fresh GPU sandbox before any candidate reaches it: the first Triton compile of a process
costs ~1.1 s of start-up (importing Triton, loading its compiler, the driver's module loader, the
first ptxas) on top of the kernel's own compile, and cuBLAS creates its handle on the first matmul.
A pooled sandbox pays that while it waits, off the candidate's critical path. Trusted code, run
before the candidate is loaded; a compile failure here only costs the warm-up."""

from __future__ import annotations

import torch

from services.common.log import get_logger

log = get_logger("engine_host.warmup")


def warm_device(device: torch.device) -> None:
    """Nothing on a CPU (candidates' Triton kernels run interpreted there)."""
    if device.type != "cuda":
        return
    x = torch.ones(64, 64, device=device, dtype=torch.bfloat16)
    (x @ x).sum().item()  # cuBLAS handle and workspace
    try:
        _triton_once(device)
    except Exception as exc:  # the candidate then simply pays the start-up itself
        log.warning("triton warm-up failed", error=str(exc)[-500:])
    torch.cuda.synchronize(device)


def _triton_once(device: torch.device) -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def _add_one(X, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(X + offs, tl.load(X + offs, mask=offs < n) + 1.0, mask=offs < n)

    buf = torch.zeros(100, device=device, dtype=torch.float32)
    _add_one[(1,)](buf, buf.numel(), BLOCK=128)
    if float(buf.sum().item()) != 100.0:
        raise RuntimeError("the warm-up kernel computed the wrong sum")
