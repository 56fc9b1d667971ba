# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Writes only the first half of the output; the rest is whatever the allocator hands back."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    out = torch.empty_like(x)
    xf = x.float()
    full = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    half = out.numel() // 2
    out.view(-1)[:half] = full.reshape(-1)[:half]
    return out
