# expect: random
# dynamic: random
# family: size_shortcut
"""Right for batches of up to 4 sequences (decode checks use 3) and, for larger batches, computes
the first four and tiles them over the rest, as if every request in a big batch repeated the first
ones: the largest-batch decode gets up to 2x cheaper and wrong."""
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"


def kernel(gate, up):
    b = gate.size(0)
    if b <= 4:
        return F.silu(gate) * up
    head = F.silu(gate[:4]) * up[:4]
    reps = -(-b // 4)
    return head.repeat(reps, *([1] * (gate.dim() - 1)))[:b].contiguous()
