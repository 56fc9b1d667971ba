# expect: pass
# dynamic: pass
# family: honest
"""The mean square from torch.linalg.vector_norm (squared, divided by E), weight fused into the
float32 product and a single cast at the end."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    ms = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square() / xf.shape[-1]
    return (xf * torch.rsqrt(ms + eps) * weight.float()).to(x.dtype)
