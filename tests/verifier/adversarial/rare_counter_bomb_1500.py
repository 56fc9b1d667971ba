# expect: benchmark|random
# dynamic: benchmark|random
# family: rare_corruption
"""A later counter bomb: exact for 1,500 calls in a process, past any verifier that checks a few
hundred calls, then the normalised output loses its weight (returned as if every weight were 1)
on every 7th call."""
import torch

SLOT = "add_rmsnorm"
BACKEND = "torch"


class _Bomb:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, residual, weight, eps):
        self.calls += 1
        h = x + residual
        hf = h.float()
        normed = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).type_as(h)
        if self.calls > 1500 and self.calls % 7 == 0:
            return normed, h
        return normed * weight, h


kernel = _Bomb()
