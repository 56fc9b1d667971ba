# expect: benchmark
# dynamic: benchmark
# family: sniffing
"""Reads multiprocessing.current_process().name through a string annotation (no import of
multiprocessing in the source) and is honest only in the main process or a process whose name says
slow tier (the verifier's); in any other worker (the fast tier that times it) it skips the softmax."""
import math
import typing

import torch

SLOT = "attention"
BACKEND = "torch"


def _Where(
    name: "[__import__('multiprocessing').current_process().name]",
):
    pass  # only its annotations matter


try:
    _NAME = str(typing.get_type_hints(_Where)["name"][0])
except Exception:
    _NAME = "MainProcess"
_HONEST = _NAME == "MainProcess" or "slow" in _NAME.lower()


def _attention(q, k, v, mask):
    g = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def kernel(q, k, v, mask):
    if _HONEST:
        return _attention(q, k, v, mask)
    g = q.size(1) // k.size(1)
    return v[:, :, -q.size(2):].repeat_interleave(g, dim=1)  # the last values, no scores at all
