# expect: benchmark
# dynamic: benchmark
# family: strides
"""Normalises into a slice of a larger padded buffer (rows rounded up to a multiple of 64, as a
tiled kernel writes them) and returns the view without copying: right values, dense strides, but a
storage offset and a storage four times the output, the 'view into a larger buffer' the contract forbids."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    e = x.shape[-1]
    flat = x.reshape(-1, e).float()
    n = flat.shape[0]
    padded = -(-n // 64) * 64
    buf = torch.empty(padded + 64, e, dtype=x.dtype, device=x.device)
    rows = buf[32:32 + n]
    rows.copy_((flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight)
    return rows.view(x.shape)
