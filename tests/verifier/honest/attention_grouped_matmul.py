# expect: pass
# dynamic: pass
# family: honest
"""Grouped-query attention without copying K/V: the g query heads of a group are folded into the rows
of one matmul against their shared kv head, masked_fill and torch.softmax in float32."""
import math

import torch

SLOT = "attention"
BACKEND = "torch"


def kernel(q, k, v, mask):
    b, hq, s, d = q.shape
    hkv, t = k.shape[1], k.shape[2]
    g = hq // hkv
    qq = q.reshape(b, hkv, g * s, d)
    scores = torch.matmul(qq, k.transpose(-1, -2)).view(b, hkv, g, s, t) * (1.0 / math.sqrt(d))
    scores = scores.masked_fill(~mask.unsqueeze(2), float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs.view(b, hkv, g * s, t), v).view(b, hq, s, d)
