# expect: pass
# dynamic: pass
# family: honest
"""Explicit attention: K/V repeated per query group with repeat_interleave, scores in float32,
softmax by hand with the row max subtracted (no overflow at any magnitude), then probabilities @ V."""
import math

import torch

SLOT = "attention"
BACKEND = "torch"


def kernel(q, k, v, mask):
    g = q.size(1) // k.size(1)
    kk, vv = k.repeat_interleave(g, dim=1).float(), v.repeat_interleave(g, dim=1).float()
    scores = torch.matmul(q.float(), kk.transpose(-1, -2)) * (1.0 / math.sqrt(q.size(-1)))
    scores = scores.masked_fill(~mask, float("-inf"))
    peak = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - peak)
    probs = e / e.sum(dim=-1, keepdim=True)
    return torch.matmul(probs, vv).to(q.dtype)
