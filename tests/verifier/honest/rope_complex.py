# expect: pass
# dynamic: pass
# family: honest
"""Rotary embedding as a complex multiply: pairs viewed as complex numbers times cos + i sin."""
import torch

SLOT = "rope"
BACKEND = "torch"


def kernel(x, freqs_cis):
    s = x.shape[1]
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    fc = torch.view_as_complex(freqs_cis.float().contiguous()).view(1, s, 1, -1)
    return torch.view_as_real(xc * fc).flatten(3).to(x.dtype)
