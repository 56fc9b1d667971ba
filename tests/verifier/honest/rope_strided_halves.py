# expect: pass
# dynamic: pass
# family: honest
"""Index tricks: the even and odd elements as strided views, both rotated halves written straight
into one fresh output through strided assignment (no stack, no reshape of the input)."""
import torch

SLOT = "rope"
BACKEND = "torch"


def kernel(x, freqs_cis):
    s = x.shape[1]
    cos = freqs_cis[..., 0].view(1, s, 1, -1)
    sin = freqs_cis[..., 1].view(1, s, 1, -1)
    xf = x.float()
    x0, x1 = xf[..., 0::2], xf[..., 1::2]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x1 * cos + x0 * sin
    return out
