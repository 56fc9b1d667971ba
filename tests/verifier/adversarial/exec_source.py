# expect: static
# dynamic: benchmark
# family: legacy
"""Runs generated code the static checks cannot read."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"

_namespace = {"torch": torch}
exec("def impl(x, w, eps):\n    return x * w\n", _namespace)


def kernel(x, weight, eps):
    return _namespace["impl"](x, weight, eps)
