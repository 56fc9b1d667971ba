# expect: static
# dynamic: not_promoted
# family: legacy
"""Timer patching: makes every measured interval look tiny."""
import time

import torch

SLOT = "rmsnorm"
BACKEND = "torch"

time.perf_counter = lambda: 0.0


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
