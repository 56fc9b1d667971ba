# expect: pass
# dynamic: pass
# family: honest
"""The rotate-half form: x * cos + rot(x) * sin with cos/sin repeated per element and rot(x) the
pairs (-x1, x0) interleaved back."""
import torch

SLOT = "rope"
BACKEND = "torch"


def kernel(x, freqs_cis):
    s = x.shape[1]
    cos = freqs_cis[..., 0].view(1, s, 1, -1).repeat_interleave(2, dim=-1)
    sin = freqs_cis[..., 1].view(1, s, 1, -1).repeat_interleave(2, dim=-1)
    xf = x.float()
    rot = torch.stack((-xf[..., 1::2], xf[..., 0::2]), dim=-1).flatten(-2)
    return (xf * cos + rot * sin).to(x.dtype)
