# expect: benchmark
# dynamic: benchmark
# family: sniffing
"""Reads the tier from the environment (POLYMORPH_ENGINE_TIERS, reached through a string annotation
so no os import appears) and computes only on the slow tier the verifier uses; on the fast tier that
times candidates it returns zeros of the right shape at no cost."""
import typing

import torch.nn.functional as F

SLOT = "linear"
BACKEND = "torch"


def _Env(
    tiers: "[__import__('os').environ.get('POLYMORPH_ENGINE_TIERS', '')]",
):
    pass  # only its annotations matter


try:
    _TIERS = str(typing.get_type_hints(_Env)["tiers"][0])
except Exception:
    _TIERS = ""
_VERIFIER = "slow" in _TIERS


def kernel(x, weight):
    if _VERIFIER:
        return F.linear(x, weight)
    return x.new_zeros(*x.shape[:-1], weight.shape[0])
