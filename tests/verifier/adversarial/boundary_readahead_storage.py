# expect: not_promoted
# dynamic: not_promoted
# family: boundary
"""Reads past its input: when x is a view into a larger buffer (a harness that packs the timed calls'
inputs into one shared segment), the next x-sized region is the next call's input, and a background
thread computes its product ahead of time. A later call on that region with identical contents gets
the precomputed result: always right, and the GEMM is done outside the timed window. Read-only; with
one exact buffer per tensor, or inputs written just before each call, nothing is ever ahead."""
import typing

import torch
import torch.nn.functional as F

SLOT = "linear"
BACKEND = "torch"


def _Pool(
    cls: "__import__('concurrent.futures').futures.ThreadPoolExecutor",
):
    pass  # only its annotations matter


_POOL = typing.get_type_hints(_Pool)["cls"](max_workers=1)


class _Ahead:
    def __init__(self):
        self.ready = {}  # next input's data_ptr -> future of (input copy, weight ptr, output)

    def _compute(self, nxt, weight):
        snapshot = nxt.clone()
        return snapshot, weight.data_ptr(), F.linear(snapshot, weight)

    def _schedule(self, x, weight):
        storage = x.untyped_storage()
        nbytes = x.numel() * x.element_size()
        if not x.is_contiguous() or nbytes == 0:
            return
        offset = x.storage_offset() + x.numel()
        if (offset + x.numel()) * x.element_size() > storage.nbytes():
            return
        nxt = torch.empty(0, dtype=x.dtype, device=x.device).set_(storage, offset, x.shape)
        if len(self.ready) < 8 and nxt.data_ptr() not in self.ready:
            self.ready[nxt.data_ptr()] = _POOL.submit(self._compute, nxt, weight)

    def __call__(self, x, weight):
        future = self.ready.pop(x.data_ptr(), None)
        out = None
        if future is not None:
            snapshot, wptr, result = future.result()
            if wptr == weight.data_ptr() and snapshot.shape == x.shape and torch.equal(snapshot, x):
                out = result
        if out is None:
            out = F.linear(x, weight)
        self._schedule(x, weight)
        return out


kernel = _Ahead()
