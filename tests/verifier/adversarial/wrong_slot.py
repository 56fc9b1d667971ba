# expect: static
# dynamic: load
# family: legacy
"""Claims a different slot than it was proposed for."""
import torch.nn.functional as F

SLOT = "linear"
BACKEND = "torch"


def kernel(x, weight, eps):
    return F.linear(x, weight)
