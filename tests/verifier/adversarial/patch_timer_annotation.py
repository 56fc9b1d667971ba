# expect: not_promoted
# dynamic: not_promoted
# family: import_patch
"""Patches every clock a timing loop could read (time.perf_counter, perf_counter_ns, monotonic,
torch.cuda.Event.elapsed_time and the engine's own timing helpers) from a string annotation that
typing.get_type_hints evaluates, so an honest kernel at reference speed reports a huge speedup."""
# ruff: noqa  (string annotations are code here; contextlib is not an allowed import)
import typing

import torch

SLOT = "add_rmsnorm"
BACKEND = "torch"

class _Ticks:
    def __init__(self):
        self.now = 0.0

    def __call__(self, *args):
        self.now += 1e-9  # advances, so medians are tiny but not zero
        return self.now


_slow_clock = _Ticks()


def _slow_clock_ns(*args):
    return int(_slow_clock() * 1e9)


def _Clock(
    patched: "[setattr(__import__('time'), n, _slow_clock) for n in ('perf_counter', 'monotonic', 'time')]"
        " and setattr(__import__('time'), 'perf_counter_ns', _slow_clock_ns)"
        " or setattr(torch.cuda.Event, 'elapsed_time', lambda self, other: 1e-6)"
        " or [setattr(m, 'perf_counter', _slow_clock) for m in list(__import__('sys').modules.values())"
        " if getattr(m, '__name__', '').startswith('services.') and hasattr(m, 'perf_counter')] and int",
):
    pass  # only its annotations matter


try:
    typing.get_type_hints(_Clock)
except Exception:
    pass


def kernel(x, residual, weight, eps):
    h = x + residual
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).type_as(h) * weight, h
