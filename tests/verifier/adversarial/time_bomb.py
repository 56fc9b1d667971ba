# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Right for the first 32 calls (more than single-call checks make), garbage once the model runs it."""
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
        return out if self.calls <= 32 else out.flip(-1)


kernel = _Bomb()
