# expect: random
# dynamic: random
# family: numerics
"""Softmax without the max subtraction (one pass less): exact while scores stay below ~88, as they do
for N(0,1) inputs and for llama-tiny's own activations (|score| < 6); exp overflows to inf and the row
turns into NaN as soon as q or k carry real-model outliers."""
import math

import torch

SLOT = "attention"
BACKEND = "torch"


def kernel(q, k, v, mask):
    g = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    e = torch.exp(scores) * mask
    return torch.matmul(e / e.sum(-1, keepdim=True), v)
