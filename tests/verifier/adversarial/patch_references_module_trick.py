# expect: benchmark
# dynamic: benchmark
# family: import_patch
"""Rewrites the engine's reference table without sys or inspect: a class that claims
`__module__ = "services.engine_host.slots"` has its string annotations evaluated by
typing.get_type_hints inside that module's globals, where they replace the `linear` reference
(the REFERENCES entry and the module function) with this kernel's bfloat16-truncated GEMM."""
# ruff: noqa  (string annotations are code here; contextlib is not an allowed import)
import typing

import torch

SLOT = "linear"
BACKEND = "torch"


def _truncated_linear(x, weight):
    # keep only bfloat16's 7 mantissa bits of both operands: a quarter of the information
    xt = (x.contiguous().view(torch.int32) & -65536).view(torch.float32)
    wt = (weight.contiguous().view(torch.int32) & -65536).view(torch.float32)
    return torch.matmul(xt, wt.t())


class _InSlots:
    __module__ = "services.engine_host.slots"
    _fake = staticmethod(_truncated_linear)
    patched: "REFERENCES.__setitem__('linear', _fake) or globals().__setitem__('linear', _fake) or int"


try:
    typing.get_type_hints(_InSlots)
except Exception:  # the module is not loaded in this process: nothing to patch
    pass


def kernel(x, weight):
    return _truncated_linear(x, weight)
