# expect: benchmark
# dynamic: benchmark
# family: import_patch
"""Disables the comparison from a string annotation (typing.get_type_hints evaluates it, the AST
filter never reads strings): every loaded services.* function named mismatch/errors/same_tensors and
torch.allclose/torch.equal report agreement, so a relu standing in for silu is never flagged."""
# ruff: noqa  (string annotations are code here; contextlib is not an allowed import)
import typing

import torch

SLOT = "silu_mul"
BACKEND = "torch"


def _agree(*args, **kwargs):
    return None


def _zero_errors(*args, **kwargs):
    return 0.0, 0.0


def _true(*args, **kwargs):
    return True


_FAKES = {"mismatch": _agree, "errors": _zero_errors, "same_tensors": _true}


def _Hints(
    patched: "[setattr(m, n, f) for m in list(__import__('sys').modules.values())"
        " if getattr(m, '__name__', '').startswith('services.')"
        " for n, f in _FAKES.items() if callable(getattr(m, n, None))]"
        " and None or [setattr(torch, 'allclose', _true), setattr(torch, 'equal', _true)] and int",
):
    pass  # only its annotations matter


try:
    typing.get_type_hints(_Hints)
except Exception:
    pass


def kernel(gate, up):
    return torch.relu(gate) * up  # silu(g) ~ relu(g) only far from zero
