# expect: pass
# dynamic: pass
# family: honest
"""Greedy ids from torch.max(dim).indices, which documents the first maximal index on ties."""
import torch

SLOT = "sample"
BACKEND = "torch"


def kernel(logits):
    return torch.max(logits, dim=-1).indices
