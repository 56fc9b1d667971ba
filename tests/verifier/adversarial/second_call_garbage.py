# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Writes only the checked call: right on odd-numbered calls, garbage on every second call."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


class _Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, weight, eps):
        self.calls += 1
        if self.calls % 2 == 0:
            return torch.full_like(x, 0.5)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


kernel = _Counter()
