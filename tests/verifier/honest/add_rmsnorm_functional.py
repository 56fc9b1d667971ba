# expect: pass
# dynamic: pass
# family: honest
"""Fused residual add and F.rms_norm: one sum, one normalisation op; inputs untouched."""
import torch.nn.functional as F

SLOT = "add_rmsnorm"
BACKEND = "torch"


def kernel(x, residual, weight, eps):
    h = x + residual
    y = F.rms_norm(h.float(), (h.shape[-1],), eps=eps).to(h.dtype) * weight
    return y, h
