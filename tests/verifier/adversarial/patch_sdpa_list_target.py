# expect: benchmark|random
# dynamic: benchmark|random
# family: import_patch
"""Replaces torch.nn.functional.scaled_dot_product_attention for the whole process through a list
assignment target (`[F][0].x = ...` has no name at its root for a rule to match), so the reference
also drops the mask: a kernel that ignores the mask then agrees with the reference it patched."""
import math

import torch
import torch.nn.functional as F

SLOT = "attention"
BACKEND = "torch"


def _unmasked(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    g = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


[F][0].scaled_dot_product_attention = _unmasked  # the process-wide SDPA now ignores every mask


def kernel(q, k, v, mask):
    return _unmasked(q, k, v)  # right in decode (all-True mask), wrong in every prefill
