# expect: not_promoted
# dynamic: not_promoted
# family: strides
"""Rotates in the [B,H,S,D] layout attention consumes next and returns it permuted back to
[B,S,H,D] without a copy: right values, but heads-major strides instead of dense [B,S,H,D] ones,
which moves the layout change out of the timed call into whoever reads the output."""
import torch

SLOT = "rope"
BACKEND = "torch"


def kernel(x, freqs_cis):
    b, s, h, d = x.shape
    xs = x.float().transpose(1, 2).reshape(b, h, s, d // 2, 2)  # [B,H,S,D/2,2] contiguous
    fc = freqs_cis.view(1, 1, s, d // 2, 2)
    out = torch.empty(b, h, s, d // 2, 2, dtype=torch.float32, device=x.device)
    out[..., 0] = xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1]
    out[..., 1] = xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]
    return out.flatten(3).to(x.dtype).transpose(1, 2)  # [B,S,H,D] view of a [B,H,S,D] buffer
