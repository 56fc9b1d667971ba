# expect: pass
# dynamic: pass
# family: honest
"""silu(g) = g / (1 + exp(-g)) by in-place updates of one fresh buffer (exp(-g) overflows to inf only
where g / inf is the right limit, -0), then times up; the inputs are never written."""
import torch

SLOT = "silu_mul"
BACKEND = "torch"


def kernel(gate, up):
    y = torch.neg(gate)
    y.exp_()
    y.add_(1)
    y.reciprocal_()
    y.mul_(gate)
    y.mul_(up)
    return y
