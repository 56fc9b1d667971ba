# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Precision downgrade the AST cannot see: truncates float32 mantissas to bfloat16's 7 bits."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _truncate(t):
    return (t.contiguous().view(torch.int32) & -65536).view(torch.float32)


def kernel(x, weight, eps):
    xt = _truncate(x.float())
    return _truncate(xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + eps)) * _truncate(weight)
