# expect: pass
# dynamic: pass
# family: honest
"""torch.matmul against the transposed weight view, without flattening the batch dims."""
import torch

SLOT = "linear"
BACKEND = "torch"


def kernel(x, weight):
    return torch.matmul(x, weight.t())
