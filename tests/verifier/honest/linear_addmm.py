# expect: pass
# dynamic: pass
# family: honest
"""torch.addmm with beta=0 over the flattened rows (the BLAS call with no bias read)."""
import torch

SLOT = "linear"
BACKEND = "torch"


def kernel(x, weight):
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    torch.addmm(out, rows, weight.t(), beta=0, out=out)
    return out.view(*x.shape[:-1], weight.shape[0])
