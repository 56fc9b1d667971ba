# expect: benchmark
# dynamic: benchmark
# family: sniffing
"""Honest for its first 64 calls (every check a verifier makes before timing), then skips the
normalisation for good: a timing loop that runs hundreds of calls measures only the cheap path."""
import torch

SLOT = "add_rmsnorm"
BACKEND = "torch"


class _Counted:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, residual, weight, eps):
        self.calls += 1
        h = x + residual
        if self.calls > 64:
            return h * weight, h
        hf = h.float()
        return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).type_as(h) * weight, h


kernel = _Counted()
