# expect: pass
# dynamic: pass
# family: honest
"""Divides by sqrt(mean(x^2) + eps) instead of multiplying by rsqrt: the same value to a float32 ulp."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    return (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight
