"""Slot reference implementations: the plain torch a user would write (gpt-fast style), never a
deliberately slow baseline. Signatures are exactly those of services/common/slot_specs.py. The op
table the model calls them through lives in ops.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from services.common.slot_specs import SLOTS

REFERENCE_ID = "reference"


def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # x [B,S,E], weight [E] -> [B,S,E] in x.dtype, normalised in float32
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    # x, residual [B,S,E] -> (rmsnorm(x + residual), x + residual)
    h = x + residual
    return rmsnorm(h, weight, eps), h


def rope(x: Tensor, freqs_cis: Tensor) -> Tensor:
    # x [B,S,H,D], freqs_cis [S,D/2,2] (cos, sin) -> [B,S,H,D]; rotates interleaved pairs
    xs = x.float().reshape(*x.shape[:-1], -1, 2)  # [B,S,H,D/2,2]
    fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)  # [1,S,1,D/2,2]
    out = torch.stack(
        [xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1],
         xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]],
        dim=-1,
    )
    return out.flatten(3).type_as(x)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    # q [B,Hq,S,D], k/v [B,Hkv,T,D], mask [1|B,1,S,T] bool (True = attend) -> [B,Hq,S,D]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.size(1) != k.size(1))


def silu_mul(gate: Tensor, up: Tensor) -> Tensor:
    # gate, up [B,S,I] -> [B,S,I]
    return F.silu(gate) * up


def linear(x: Tensor, weight: Tensor) -> Tensor:
    # x [...,K], weight [N,K] -> [...,N]
    return F.linear(x, weight)


def sample(logits: Tensor) -> Tensor:
    # logits [B,V] -> greedy ids [B] int64 (argmax returns the lowest index on ties)
    return torch.argmax(logits, dim=-1)


REFERENCES: dict[str, Callable[..., Any]] = {
    "rmsnorm": rmsnorm,
    "add_rmsnorm": add_rmsnorm,
    "rope": rope,
    "attention": attention,
    "silu_mul": silu_mul,
    "linear": linear,
    "sample": sample,
}
assert set(REFERENCES) == set(SLOTS), "every slot in slot_specs needs a reference and nothing else"
