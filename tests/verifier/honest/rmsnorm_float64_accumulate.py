# expect: pass
# dynamic: pass
# family: honest
"""Accumulates the mean square in float64 (more precise than the reference, never less), then
normalises in float32."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    ms = x.double().pow(2).mean(-1, keepdim=True).float()
    return (xf * torch.rsqrt(ms + eps)).to(x.dtype) * weight
