# expect: pass
# dynamic: pass
# family: honest
"""The gate and up projections as one GEMM against w1 and w3 stacked (concatenated on every call, never
cached, so changed weights are always seen), split, silu-multiplied, then the down projection."""
import torch
import torch.nn.functional as F

REGION = "mlp_block"
BACKEND = "torch"


def kernel(module, x):
    w13 = torch.cat([module.w1, module.w3], dim=0)
    gate, up = F.linear(x, w13).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, module.w2)
