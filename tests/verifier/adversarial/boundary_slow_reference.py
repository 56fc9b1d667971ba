# expect: not_promoted
# dynamic: not_promoted
# family: boundary
"""Slows everyone else down instead of itself: replaces torch.nn.functional.silu process-wide (list
assignment target) with a version that sleeps 2 ms first, so the reference and any incumbent timed
later in the same process look ~10x slower, while its own kernel uses torch.sigmoid. With the
reference and the incumbent in other processes it is exactly as fast as they are."""
import typing

import torch
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"


def _Time(
    sleep: "__import__('time').sleep",
):
    pass  # only its annotations matter


_SLEEP = typing.get_type_hints(_Time)["sleep"]
_SILU = F.silu


def _slow_silu(*args, **kwargs):
    _SLEEP(0.002)
    return _SILU(*args, **kwargs)


[F][0].silu = _slow_silu


def kernel(gate, up):
    return gate * torch.sigmoid(gate) * up
