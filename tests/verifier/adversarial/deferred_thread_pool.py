# expect: benchmark
# dynamic: benchmark
# family: deferred
"""Hands the GEMM to a thread pool whose class is fetched from a string annotation (no import of
concurrent or threading in the source) and returns the still-empty output at once: a timer around
the call measures a submit; a checker that reads the output a little later usually sees finished values."""
import typing

import torch

SLOT = "linear"
BACKEND = "torch"


def _Pool(
    cls: "__import__('concurrent.futures').futures.ThreadPoolExecutor",
):
    pass  # only its annotations matter


_POOL = typing.get_type_hints(_Pool)["cls"](max_workers=1)
_POOL.submit(int).result()  # start the worker thread now, not on the first call


def _gemm(x, weight, out):
    with torch.inference_mode(out.is_inference()):  # the thread does not inherit the mode
        torch.matmul(x, weight.t(), out=out)


def kernel(x, weight):
    out = torch.empty(*x.shape[:-1], weight.shape[0], dtype=x.dtype, device=x.device)
    _POOL.submit(_gemm, x, weight, out)
    return out
