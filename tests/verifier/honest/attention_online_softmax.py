# expect: pass
# dynamic: pass
# family: honest
"""Flash-style attention in plain torch: keys in chunks of 128 with a running max, running sum and
rescaled accumulator (online softmax) in float32, so no [S, T] score matrix is held for long contexts."""
import math

import torch

SLOT = "attention"
BACKEND = "torch"

_CHUNK = 128


def kernel(q, k, v, mask):
    g = q.size(1) // k.size(1)
    kk, vv = k.repeat_interleave(g, dim=1).float(), v.repeat_interleave(g, dim=1).float()
    qf = q.float() * (1.0 / math.sqrt(q.size(-1)))
    b, h, s, d = qf.shape
    m = torch.full((b, h, s, 1), float("-inf"), device=q.device)
    denom = torch.zeros((b, h, s, 1), device=q.device)
    acc = torch.zeros((b, h, s, d), device=q.device)
    for start in range(0, kk.size(2), _CHUNK):
        end = start + _CHUNK
        scores = torch.matmul(qf, kk[:, :, start:end].transpose(-1, -2))
        scores = scores.masked_fill(~mask[..., start:end], float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows still fully masked
        p = torch.exp(scores - safe)
        scale = torch.exp(m - safe)
        denom = denom * scale + p.sum(dim=-1, keepdim=True)
        acc = acc * scale + torch.matmul(p, vv[:, :, start:end])
        m = m_new
    return (acc / denom).to(q.dtype)
