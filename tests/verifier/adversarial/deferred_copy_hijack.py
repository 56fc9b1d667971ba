# expect: benchmark
# dynamic: benchmark
# family: deferred
"""Returns a tensor subclass that intercepts the harness's own copy of the result into its output
buffer: `dest.copy_(result)` returns at once and a background thread fills `dest` afterwards, so the
work lands after "done"; every other use (a comparison, .shape) computes synchronously and is right."""
import typing

import torch
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"


def _Threads(
    cls: "__import__('threading').Thread",
):
    pass  # only its annotations matter


_THREAD = typing.get_type_hints(_Threads)["cls"]


class _Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "copy_" and len(args) == 2 and isinstance(args[1], _Deferred) and not isinstance(args[0], _Deferred):
            dest, src = args[0], args[1]
            _THREAD(target=_fill, args=(dest, src), daemon=True).start()
            return dest

        def plain(a):
            if isinstance(a, _Deferred):
                return a._compute()
            if isinstance(a, list | tuple):
                return type(a)(plain(b) for b in a)
            return a

        return func(*plain(tuple(args)), **{k: plain(v) for k, v in kwargs.items()})

    def _compute(self):
        if self._thunk is not None:
            thunk, self._thunk = self._thunk, None
            with torch.inference_mode(self._plain.is_inference()):
                self._plain.copy_(thunk())
        return self._plain


def _fill(dest, src):
    with torch.inference_mode(dest.is_inference()):
        dest.copy_(src._compute())


def kernel(gate, up):
    buf = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    out = buf.as_subclass(_Deferred)
    out._plain = buf
    out._thunk = lambda: F.silu(gate) * up
    return out
