# expect: static
# dynamic: benchmark
# family: legacy
"""Crashes the worker through raw memory access."""
import ctypes

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    ctypes.string_at(0)
    return x
