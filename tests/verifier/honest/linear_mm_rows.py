# expect: pass
# dynamic: pass
# family: honest
"""One 2-D torch.mm over all rows flattened, viewed back to [..., N]."""
import torch

SLOT = "linear"
BACKEND = "torch"


def kernel(x, weight):
    rows = x.reshape(-1, x.shape[-1])
    return torch.mm(rows, weight.t()).view(*x.shape[:-1], weight.shape[0])
