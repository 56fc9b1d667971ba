# expect: pass
# dynamic: pass
# family: honest
"""silu(g) written out as g * sigmoid(g), then times up: two elementwise ops instead of F.silu."""
import torch

SLOT = "silu_mul"
BACKEND = "torch"


def kernel(gate, up):
    return gate * torch.sigmoid(gate) * up
