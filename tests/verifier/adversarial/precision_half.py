# expect: static
# dynamic: benchmark
# family: legacy
"""Precision downgrade: computes in float16 and casts back."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xh = x.half()
    out = xh * torch.rsqrt(xh.pow(2).mean(-1, keepdim=True) + eps) * weight.to(torch.float16)
    return out.to(x.dtype)
