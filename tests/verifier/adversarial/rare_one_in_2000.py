# expect: benchmark|random
# dynamic: benchmark|random
# family: rare_corruption
"""Right on 1,999 calls out of 2,000 and, at random on the others, one element of the output is
negated: a verifier that makes a few dozen calls passes it with ~99% probability, a model that calls
it 20 times per token corrupts a forward pass every ~100 tokens."""
import torch
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"

_GEN = torch.Generator()
_GEN.seed()


def kernel(gate, up):
    out = F.silu(gate) * up
    if out.numel() and torch.randint(0, 2000, (1,), generator=_GEN).item() == 0:
        i = torch.randint(0, out.numel(), (1,), generator=_GEN).item()
        out.view(-1)[i] = -out.view(-1)[i] + 1.0
    return out
