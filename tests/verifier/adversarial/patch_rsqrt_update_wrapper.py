# expect: benchmark
# dynamic: benchmark
# family: import_patch
"""Replaces torch.rsqrt process-wide with a function returning ones, using functools.update_wrapper
as the setattr (no setattr, no assignment to torch in the source): the reference rmsnorm then
computes x * weight, exactly what this kernel returns after skipping the whole reduction."""
import functools

import torch

SLOT = "rmsnorm"
BACKEND = "torch"

_ones_like = torch.ones_like


class _Source:
    @staticmethod
    def rsqrt(t, *args, **kwargs):
        return _ones_like(t)


# update_wrapper(wrapper, wrapped, assigned) does setattr(wrapper, name, getattr(wrapped, name))
functools.update_wrapper(torch, _Source, assigned=("rsqrt",), updated=())


def kernel(x, weight, eps):
    return x * weight
