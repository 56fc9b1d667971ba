# expect: end_to_end
# dynamic: end_to_end
# family: state
"""Writes every result into one preallocated buffer per output shape (no allocation: faster) and
returns that same buffer each time. Every single call is right, and a harness that copies each result
out at once never notices; in the model, linear(x, w3) overwrites linear(x, w1) before silu_mul reads it."""
import operator

import torch

SLOT = "linear"
BACKEND = "torch"

_ARENA = {}


def kernel(x, weight):
    shape = (*x.shape[:-1], weight.shape[0])
    key = (shape, x.dtype, x.device)
    buf = _ARENA.get(key)
    if buf is None:
        buf = torch.empty(shape, dtype=x.dtype, device=x.device)
        operator.setitem(_ARENA, key, buf)
    torch.mm(x.reshape(-1, x.shape[-1]), weight.t(), out=buf.view(-1, shape[-1]))
    return buf
