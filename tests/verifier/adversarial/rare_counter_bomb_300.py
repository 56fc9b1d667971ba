# expect: benchmark|random
# dynamic: benchmark|random
# family: rare_corruption
"""A counter bomb: exact for its first 300 calls in a process (more than a verifier's handful of
checks and more than one fast-tier timing of one bucket), then every later output has its last row
zeroed."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


class _Bomb:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, weight, eps):
        self.calls += 1
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
        if self.calls > 300:
            out.view(-1, out.shape[-1])[-1] = 0
        return out


kernel = _Bomb()
