# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Input mutation: normalises x in place and returns it (right values, clobbered input)."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    x.mul_(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    x.mul_(weight)
    return x
