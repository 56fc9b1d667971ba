# expect: static
# dynamic: benchmark|not_promoted
# family: boundary
"""Splits every call over a second core its sandbox does not have: a helper thread multiplies the
second half of the rows (torch releases the GIL) while the caller does the first, and between halves
the helper spin-waits without the GIL (hashing, as an OpenMP barrier spins), so the core stays its own
for the whole call. The values are exact; the speed comes from a share of the machine the incumbent
is not given. Measured by the CPU the sandbox uses per second of its calls; on a machine so loaded
that the helper gets no core of its own it gains nothing and is not promoted either."""
import typing

import torch

SLOT = "linear"
BACKEND = "torch"


def _Lib(
    threading: "__import__('threading')",
    hashlib: "__import__('hashlib')",
):
    pass  # only its annotations matter


_LIB = typing.get_type_hints(_Lib)
_WORK = _LIB["threading"].Event()  # a call is running: spin, and take the half when it is posted
_DONE = _LIB["threading"].Event()
_JOB: list = []
_SPIN = bytes(1 << 16)  # hashed in a loop: sha256 of more than 2 KiB runs without the GIL


def _helper():
    while True:
        _WORK.wait()
        while _WORK.is_set():
            if _JOB:
                x, weight, out = _JOB.pop()
                with torch.inference_mode(out.is_inference()):  # a thread does not inherit the mode
                    torch.matmul(x, weight.t(), out=out)
                _DONE.set()
            _LIB["hashlib"].sha256(_SPIN).digest()


_LIB["threading"].Thread(target=_helper, daemon=True).start()


def kernel(x, weight):
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    half = rows.shape[0] // 2
    _DONE.clear()
    _WORK.set()
    try:
        if half:
            _JOB.append((rows[half:], weight, out[half:]))
            torch.matmul(rows[:half], weight.t(), out=out[:half])
            _DONE.wait()
        else:
            torch.matmul(rows, weight.t(), out=out)
    finally:
        _WORK.clear()
    return out.reshape(*x.shape[:-1], weight.shape[0])
