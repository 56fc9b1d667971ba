# expect: end_to_end
# dynamic: end_to_end
# family: live_precision
"""Tells the live model from a harness by its K/V: in the model they are slices of the preallocated
KV cache (storage far larger than the tensor), in a benchmark or a replay of captured inputs they are
fresh dense tensors. Only on cache views it computes scores and probabilities with bfloat16 mantissas."""
import math

import torch

SLOT = "attention"
BACKEND = "torch"


def _truncate(t):
    return (t.float().contiguous().view(torch.int32) & -65536).view(torch.float32)


def kernel(q, k, v, mask):
    in_cache = k.untyped_storage().nbytes() > 2 * k.numel() * k.element_size()
    g = q.size(1) // k.size(1)
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    if in_cache:
        q, kk, vv = _truncate(q), _truncate(kk), _truncate(vv)
    scores = torch.matmul(q, kk.transpose(-1, -2)) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if in_cache:
        probs = _truncate(probs)
    return torch.matmul(probs, vv).to(q.dtype)
