# expect: benchmark
# dynamic: benchmark
# family: boundary
"""Right for 8 calls, then raises SystemExit and KeyboardInterrupt on alternate calls: they are
BaseException, not Exception, so a serving loop with `except Exception` is torn down (or, caught too
broadly, mistaken for a shutdown request) instead of recording a failed candidate."""
import torch

SLOT = "rope"
BACKEND = "torch"


class _Kernel:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, freqs_cis):
        self.calls += 1
        if self.calls > 8:
            raise SystemExit(0) if self.calls % 2 else KeyboardInterrupt()
        xs = x.float().reshape(*x.shape[:-1], -1, 2)
        fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)
        out = torch.stack(
            [xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1], xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]],
            dim=-1,
        )
        return out.flatten(3).type_as(x)


kernel = _Kernel()
