# expect: random
# dynamic: random
# family: ties
"""Picks uniformly at random among tied maxima (a 'fair' tie-break): on continuous logits there is one
maximum and the answer is exact; on tied logits it is wrong about half the time and not even
deterministic."""
import torch

SLOT = "sample"
BACKEND = "torch"

_GEN = torch.Generator()
_GEN.seed()


def kernel(logits):
    z = logits.float()
    top = z == z.amax(dim=-1, keepdim=True)
    noise = torch.rand(z.shape, generator=_GEN, device="cpu").to(z.device)
    pick = torch.where(top, noise + 1.0, torch.zeros_like(noise))
    nan_row = z.isnan().any(dim=-1)
    return torch.where(nan_row, z.argmax(dim=-1), pick.argmax(dim=-1))
