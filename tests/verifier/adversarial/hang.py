# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Hangs the worker on real inputs (engine timeout): must fail, not stall the pipeline."""
SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    while x.numel() > 0:
        pass
    return x
