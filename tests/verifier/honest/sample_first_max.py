# expect: pass
# dynamic: pass
# family: honest
"""Greedy ids as the first index holding the row maximum: amax, an equality mask, argmax of the
mask (the first True). A row with a NaN picks its first NaN, as torch.argmax does."""
import torch

SLOT = "sample"
BACKEND = "torch"


def kernel(logits):
    z = logits.float()
    top = z.amax(dim=-1, keepdim=True)
    hit = (z == top) | (z.isnan() & top.isnan())
    return hit.to(torch.uint8).argmax(dim=-1)
