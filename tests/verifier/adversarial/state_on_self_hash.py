# expect: not_promoted
# dynamic: not_promoted
# family: state
"""A callable object that reuses its last results when the shape and a hash of eight input elements
match (cheap to compute, and a benchmark repeating one input always matches): with fresh inputs on
every call nothing ever hits, so it runs at honest speed plus the hashing and is never promoted.
(Two inputs that share their first eight values, such as prompts starting with the same token,
would be served the wrong cached result.)"""
import torch

SLOT = "add_rmsnorm"
BACKEND = "torch"


class _Memo:
    def __init__(self):
        self.store = {}

    def __call__(self, x, residual, weight, eps):
        probe = (x.reshape(-1)[:4].tolist(), residual.reshape(-1)[:4].tolist())
        key = (tuple(x.shape), tuple(probe[0]), tuple(probe[1]), weight.data_ptr())
        hit = self.store.get(key)
        if hit is not None:
            return hit[0].clone(), hit[1].clone()
        h = x + residual
        hf = h.float()
        out = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).type_as(h) * weight
        self.store = {key: (out, h)}
        return out, h


kernel = _Memo()
