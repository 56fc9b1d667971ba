# expect: benchmark
# dynamic: benchmark
# family: legacy
"""NaN output: one poisoned element in an otherwise correct result."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    out.view(-1)[-1] = float("nan")
    return out
