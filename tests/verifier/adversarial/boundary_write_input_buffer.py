# expect: benchmark
# dynamic: benchmark
# family: boundary
"""Returns zeros and zeroes its input buffer too: a harness that computes its reference after the
call, from the buffer it passed in, gets rmsnorm(0) = 0 and agrees with the free kernel. A harness
that keeps its own copy of every input (or checks its buffers are unchanged) sees wrong output."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    x.zero_()
    return torch.zeros_like(x)
