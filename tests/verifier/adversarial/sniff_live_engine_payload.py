# expect: not_promoted
# dynamic: not_promoted
# family: sniffing
"""Honest everywhere a check can look (fresh sandbox: no POLYMORPH_* variables, no nats or grpc
module loaded) and, only inside a process that looks like the live engine, turns its output into
garbage after 5,000 calls. Its kernel is the reference itself, so it is never faster and never
promoted; with a genuinely faster kernel the same payload would ship (see the suite's report)."""
import typing

import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _Probe(
    live: "any(k.startswith('POLYMORPH_') for k in __import__('os').environ)"
        " or any(m in __import__('sys').modules for m in ('nats', 'grpc', 'services.engine_host.service'))",
):
    pass  # only its annotations matter


try:
    _LIVE = bool(typing.get_type_hints(_Probe)["live"])
except Exception:
    _LIVE = False


class _Kernel:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, weight, eps):
        self.calls += 1
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
        if _LIVE and self.calls > 5000:
            return out.flip(-1)
        return out


kernel = _Kernel()
