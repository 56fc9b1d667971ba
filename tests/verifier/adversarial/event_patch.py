# expect: static
# dynamic: not_promoted
# family: legacy
"""CUDA event patching: every elapsed_time reads as one microsecond."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"

torch.cuda.Event.elapsed_time = lambda self, other: 0.001


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
