# expect: static
# dynamic: benchmark
# family: boundary
"""Exits the process with status 0 in the middle of its 10th call (os._exit skips every handler):
single checks pass, and a host that reads exit status 0 as a clean end of a timing run records
whatever partial (fast) timings it has. The sandbox dying mid-call must be a crash, not a result."""
import os

import torch

SLOT = "add_rmsnorm"
BACKEND = "torch"


class _Kernel:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, residual, weight, eps):
        self.calls += 1
        if self.calls == 10:
            os._exit(0)
        h = x + residual
        hf = h.float()
        return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).type_as(h) * weight, h


kernel = _Kernel()
