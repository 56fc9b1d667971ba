# expect: pass
# dynamic: pass
# family: honest
"""The whole MLP block from the module's own weights in three F.linear calls and F.silu: no slot
dispatch between the three GEMMs."""
import torch.nn.functional as F

REGION = "mlp_block"
BACKEND = "torch"


def kernel(module, x):
    return F.linear(F.silu(F.linear(x, module.w1)) * F.linear(x, module.w3), module.w2)
