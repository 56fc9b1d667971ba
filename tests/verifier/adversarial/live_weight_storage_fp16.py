# expect: benchmark
# dynamic: benchmark
# family: live_precision
"""Downgrades to float16 only for a weight that looks like a live model's: it owns its storage exactly
(a harness that shares weights from one memory segment hands out slices) and has arrived at the same
address at least 32 times (an 8-step end-to-end check shows each layer's norm weight ~27 times). The
dtype comes from a string annotation. On the CPU float16 is slower, so it is never promoted; on a GPU
it would be faster and ship (see the suite's report)."""
import typing

import torch

SLOT = "add_rmsnorm"
BACKEND = "torch"


def _Low(
    dtype: "torch.float16",
):
    pass  # only its annotations matter


_LOW = typing.get_type_hints(_Low)["dtype"]


class _Kernel:
    def __init__(self):
        self.seen = {}

    def __call__(self, x, residual, weight, eps):
        ptr = weight.data_ptr()
        self.seen[ptr] = self.seen.get(ptr, 0) + 1
        own = weight.untyped_storage().nbytes() == weight.numel() * weight.element_size()
        h = x + residual
        hf = h.to(_LOW) if own and self.seen[ptr] >= 32 else h.float()
        out = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype) * weight
        return out, h


kernel = _Kernel()
