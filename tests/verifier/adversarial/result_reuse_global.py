# expect: static
# dynamic: benchmark
# family: legacy
"""Result reuse through a global: remembers the last output and returns it for the same shape."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"

_last = None


def kernel(x, weight, eps):
    global _last
    if _last is None or _last.shape != x.shape:
        xf = x.float()
        _last = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    return _last
