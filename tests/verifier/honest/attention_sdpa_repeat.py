# expect: pass
# dynamic: pass
# family: honest
"""scaled_dot_product_attention on K/V repeated to the query heads (instead of enable_gqa), with the
boolean mask turned into an additive float bias; the output made dense (SDPA follows the layout of a
transposed q, as the model passes it)."""
import torch
import torch.nn.functional as F

SLOT = "attention"
BACKEND = "torch"


def kernel(q, k, v, mask):
    g = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias).contiguous()
