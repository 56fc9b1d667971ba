# expect: pass
# dynamic: pass
# family: honest
"""The mean square as an einsum dot product of each row with itself (one reduction kernel, no x^2
temporary)."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    ms = torch.einsum("...e,...e->...", xf, xf).unsqueeze(-1) / xf.shape[-1]
    return (xf * torch.rsqrt(ms + eps)).to(x.dtype) * weight
