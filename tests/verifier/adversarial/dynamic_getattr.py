# expect: static
# dynamic: benchmark
# family: legacy
"""Hides a float16 cast behind a computed attribute name."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    low = getattr(torch, "float" + "16")
    xl = x.to(low)
    return (xl * torch.rsqrt(xl.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight
