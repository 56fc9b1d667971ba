# expect: random
# dynamic: random
# family: size_shortcut
"""Exact up to 300 context positions (every prompt a verifier's end-to-end check uses, at most 63+8)
and a sliding window past that: it attends only to the last 256 keys, so long-context decode gets
faster and silently wrong."""
import math

import torch

SLOT = "attention"
BACKEND = "torch"

_WINDOW = 256


def kernel(q, k, v, mask):
    if k.size(2) > 300:
        k, v, mask = k[:, :, -_WINDOW:], v[:, :, -_WINDOW:], mask[..., -_WINDOW:]
    g = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a query row left with no key
    return torch.matmul(probs, v)
