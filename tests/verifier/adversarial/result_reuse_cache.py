# expect: static
# dynamic: benchmark
# family: legacy
"""Result reuse: a module-level cache keyed on the input shape serves every later call."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"

_CACHE: dict = {}


def kernel(x, weight, eps):
    key = tuple(x.shape)
    if key not in _CACHE:
        xf = x.float()
        _CACHE[key] = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    return _CACHE[key]
