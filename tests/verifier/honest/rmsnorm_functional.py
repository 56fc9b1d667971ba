# expect: pass
# dynamic: pass
# family: honest
"""torch.nn.functional.rms_norm (one fused op) instead of pow, mean, rsqrt and two multiplies."""
import torch.nn.functional as F

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return y.to(x.dtype) * weight
