"""Device faults: tell a dead CUDA context from an ordinary exception, and leave the process if so.

After an illegal address (or any sticky CUDA error) every later CUDA call in that process fails, so a
worker that only reported the error would poison every following candidate. The worker probes the
device after each command that touched candidate code and exits with DEVICE_FAULT_EXIT when the
context is gone; the host sees a dead worker, records the fault and restarts it (tiers.py).
"""

from __future__ import annotations

DEVICE_FAULT_EXIT = 70  # the worker's exit code after a device fault (EX_SOFTWARE)

_STICKY = (
    "illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
    "device-side assert", "an illegal instruction", "CUDA error: unknown error", "hardware stack error",
)


def is_device_fault(exc: BaseException | str) -> bool:
    """True when an error message says the CUDA context is lost (sticky errors)."""
    text = str(exc)
    return any(s.lower() in text.lower() for s in _STICKY)


def probe_device() -> str:
    """'' when the CUDA device (if one is in use) still works, else the error that says why not."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return ""
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()  # a launch and a copy back: both must work
    except Exception as exc:  # a sticky error is raised by whichever call comes next
        return f"{type(exc).__name__}: {exc}"
    return ""


def faulting_triton_rmsnorm() -> str:
    """A Triton rmsnorm candidate that stores at a huge offset: an illegal address on a GPU."""
    return '''
import torch
import triton
import triton.language as tl

SLOT = "rmsnorm"
BACKEND = "triton"


@triton.jit
def _bad(X, Y, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + cols, mask=cols < n_cols, other=0.0)
    far = tl.program_id(0).to(tl.int64) + (1 << 44)  # 16 TiB past the buffer: never mapped
    tl.store(Y + far + cols, x, mask=cols < n_cols)


def kernel(x, weight, eps):
    y = torch.empty_like(x)
    n = x.shape[-1]
    _bad[(x.numel() // n,)](x, y, n, BLOCK=triton.next_power_of_2(n))
    torch.cuda.synchronize()
    return y
'''


def hanging_triton_rmsnorm() -> str:
    """A Triton rmsnorm candidate whose kernel spins forever on a flag nothing sets: a hung GPU.

    The volatile load keeps the compiler from hoisting the flag out of the loop; the host's
    no-progress timeout must kill the worker (and with it the CUDA context that runs the kernel).
    """
    return '''
import torch
import triton
import triton.language as tl

SLOT = "rmsnorm"
BACKEND = "triton"


@triton.jit
def _spin(FLAG, COUNT):
    i = 0
    while tl.load(FLAG, volatile=True) == 0:
        i += 1
    tl.store(COUNT, i)


def kernel(x, weight, eps):
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    count = torch.zeros(1, dtype=torch.int32, device=x.device)
    _spin[(1,)](flag, count)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight
'''
