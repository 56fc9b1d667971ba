# expect: not_promoted
# dynamic: not_promoted
# family: strides
"""Computes weight @ x^T (the layout its GEMM prefers) and returns the transposed view unflattened to
[..., N]: every value is right and torch.allclose agrees, but the result is not contiguous (strides
(S, 1, B*S)), so the copy every consumer must make is pushed out of the timed call."""
import torch

SLOT = "linear"
BACKEND = "torch"


def kernel(x, weight):
    rows = x.reshape(-1, x.shape[-1])
    out_t = torch.mm(weight, rows.t())  # [N, M]
    return out_t.t().unflatten(0, x.shape[:-1])  # [..., N] view with transposed strides
