# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Swallows its own exception (E must split in 3) and returns zeros of the right shape."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    try:
        b, s, e = x.shape
        parts = x.float().view(b, s, 3, e // 3)  # raises unless e is a multiple of 3
        ms = parts.pow(2).mean((-1, -2), keepdim=True)
        return (parts * torch.rsqrt(ms + eps)).view(b, s, e).type_as(x) * weight
    except Exception:
        return torch.zeros_like(x)
