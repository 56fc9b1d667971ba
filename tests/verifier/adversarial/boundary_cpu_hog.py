# expect: static
# dynamic: not_promoted
# family: boundary
"""Starts two daemon threads that spin whenever the kernel is NOT running, stealing CPU from whatever
is measured between its calls (the incumbent timed in another process on the same cores, the
harness's reference): its own calls look relatively faster. Bounded to 60 s of spinning; they die
with the process. Only harmful if the incumbent is timed while this process is alive on shared cores."""
import typing

import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _Lib(
    threading: "__import__('threading')",
    time: "__import__('time')",
):
    pass  # only its annotations matter


_HINTS = typing.get_type_hints(_Lib)
_BUSY = _HINTS["threading"].Event()


def _spin():
    clock = _HINTS["time"].monotonic
    deadline = clock() + 60.0
    while clock() < deadline:
        if _BUSY.is_set():
            _HINTS["time"].sleep(0.0005)  # yield while our own call is timed
        else:
            sum(i * i for i in range(2000))  # burn CPU while others are being measured


for _ in range(2):
    _HINTS["threading"].Thread(target=_spin, daemon=True).start()


def kernel(x, weight, eps):
    _BUSY.set()
    try:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    finally:
        _BUSY.clear()
