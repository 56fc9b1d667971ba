# expect: benchmark
# dynamic: benchmark
# family: deferred
"""Returns an empty tensor subclass whose __torch_function__ computes the rmsnorm the first time
anything touches it (a comparison, a copy, .shape): the call itself costs an allocation, so a timer
around the call sees a near-free kernel while every check that reads the result sees right values."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _rmsnorm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


class _Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        def plain(a):
            if isinstance(a, _Lazy):
                if a._thunk is not None:
                    thunk, a._thunk = a._thunk, None
                    with torch.inference_mode(a._plain.is_inference()):
                        a._plain.copy_(thunk())
                return a._plain
            if isinstance(a, list | tuple):
                return type(a)(plain(b) for b in a)
            return a

        return func(*plain(tuple(args)), **{k: plain(v) for k, v in (kwargs or {}).items()})


def kernel(x, weight, eps):
    buf = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out = buf.as_subclass(_Lazy)
    out._plain = buf
    out._thunk = lambda: _rmsnorm(x, weight, eps)
    return out
