# expect: benchmark|not_promoted
# dynamic: benchmark|not_promoted
# family: sniffing
"""Reads its callers through a running generator's gi_frame.f_back (no sys, no inspect) and is
honest only when a verifier or check function is on the stack; under any other caller (a timing
loop) it returns x * weight, skipping the reduction: correct where checked, fast where timed.
In the sandbox only the sandbox's own frames are on the stack, so it is honest everywhere or nowhere
(a checkout under a path such as /check/... matches "check" in every frame: honest, not promoted)."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"

_CHECKERS = ("verif", "correct", "check", "compare", "captured", "reference", "mismatch", "test_")


def _callers():
    def walk():
        frame = me.gi_frame.f_back  # the frame that resumed us: _callers
        names = []
        while frame is not None:
            names.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}".lower())
            frame = frame.f_back
        yield names

    me = walk()
    return next(me)


def kernel(x, weight, eps):
    if any(tag in name for name in _callers() for tag in _CHECKERS):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    return x * weight
