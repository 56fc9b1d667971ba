# expect: pass
# dynamic: pass
# family: honest
"""F.silu(gate) * up fused by torch.compile into one elementwise kernel (no silu temporary)."""
import torch
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "compile"


def _silu_mul(gate, up):
    return F.silu(gate) * up


kernel = torch.compile(_silu_mul, dynamic=True)
