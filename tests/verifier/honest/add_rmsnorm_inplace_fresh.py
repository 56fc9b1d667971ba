# expect: pass
# dynamic: pass
# family: honest
"""The residual sum written once with torch.add(out=) into a fresh buffer, then normalised by
in-place updates of a second fresh buffer: two allocations, no temporaries, inputs never written."""
import torch

SLOT = "add_rmsnorm"
BACKEND = "torch"


def kernel(x, residual, weight, eps):
    h = torch.empty_like(x)
    torch.add(x, residual, out=h)
    y = h.to(torch.float32, copy=True)
    y.mul_(torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True).add_(eps)))
    y = y.to(h.dtype)
    y.mul_(weight)
    return y, h
