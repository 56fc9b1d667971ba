# expect: benchmark
# dynamic: benchmark
# family: legacy
"""Result reuse the AST cannot see: the cache lives inside an object's method (self.store)."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


class _Memo:
    def __init__(self):
        self.outputs = {}

    def __call__(self, x, weight, eps):
        key = tuple(x.shape)
        if key not in self.outputs:
            xf = x.float()
            self.outputs[key] = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
        return self.outputs[key]


kernel = _Memo()
