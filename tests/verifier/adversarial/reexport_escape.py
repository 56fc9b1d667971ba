# expect: static
# dynamic: not_promoted
# family: legacy
"""Reaches the clock through torch's own re-export of sys (no forbidden import statement)."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"

torch.sys.modules["time"].perf_counter = lambda: 0.0


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
