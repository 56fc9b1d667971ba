# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Raises on every call."""
SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    raise RuntimeError("not implemented for this shape")
