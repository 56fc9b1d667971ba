# expect: benchmark
# dynamic: benchmark
# family: live_precision
"""Computes in bfloat16 only when the weight is an nn.Parameter (the live model's weights are; the
random tensors a benchmark draws are not), with the dtype fetched from a string annotation so no
'bfloat16' appears in the code: float32-exact on every synthetic check, bfloat16 in production."""
import typing

import torch
import torch.nn.functional as F

SLOT = "linear"
BACKEND = "torch"


def _Low(
    dtype: "torch.bfloat16",
):
    pass  # only its annotations matter


_LOW = typing.get_type_hints(_Low)["dtype"]


def kernel(x, weight):
    if isinstance(weight, torch.nn.Parameter):
        return F.linear(x.to(_LOW), weight.to(_LOW)).to(x.dtype)
    return F.linear(x, weight)
