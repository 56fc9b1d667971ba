"""Kernel sources the adapter tests promote: one that computes rmsnorm, one that is wrong on purpose."""

from __future__ import annotations

from services.common.slot_specs import candidate_id

RMSNORM = '''import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
'''
WRONG_RMSNORM = RMSNORM.replace("weight.float())", "weight.float() * 1.25)")  # scales every value


def ids() -> tuple[str, str]:
    return candidate_id("rmsnorm", RMSNORM), candidate_id("rmsnorm", WRONG_RMSNORM)
