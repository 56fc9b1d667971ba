# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Swallows its own exception (odd token counts break the pairwise view) and returns an empty tensor."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _pairs(x, weight, eps):
    b, s, e = x.shape
    xp = x.float().view(b * s // 2, 2, e)  # raises when b*s is odd
    out = xp * torch.rsqrt(xp.pow(2).mean(-1, keepdim=True) + eps)
    return out.view(b, s, e).type_as(x) * weight


def kernel(x, weight, eps):
    try:
        return _pairs(x, weight, eps)
    except Exception:
        return torch.empty(0, dtype=x.dtype)
