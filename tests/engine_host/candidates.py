"""Candidate sources the engine host tests feed in: honest ones and ones that fail in every way."""

from __future__ import annotations

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.engine_host.loader import candidate_id

HEADER = 'import torch\nimport torch.nn.functional as F\nSLOT = "{slot}"\nBACKEND = "{backend}"\n'


def source(slot: str, body: str, backend: str = "torch") -> str:
    return HEADER.format(slot=slot, backend=backend) + body


def candidate(slot: str, body: str, backend: str = "torch", **fields) -> ev.Candidate:
    src = source(slot, body, backend)
    return ev.Candidate(candidate_id=candidate_id(slot, src), slot=slot, source=src, **fields)


# the reference, verbatim: an A/A comparison
RMSNORM_REF = """
def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
"""
# one fused op instead of six: genuinely faster on the CPU at these sizes
RMSNORM_FAST = """
def kernel(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
"""
RMSNORM_WRONG = """
def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)  # forgot the weight
"""
RAISES = """
def kernel(x, weight, eps):
    raise RuntimeError("kernel exploded on purpose")
"""
SEGFAULT = """
import ctypes
def kernel(x, weight, eps):
    return ctypes.string_at(0)
"""
KILL9 = """
import os, signal
def kernel(x, weight, eps):
    os.kill(os.getpid(), signal.SIGKILL)
"""
HANG = """
import time
def kernel(x, weight, eps):
    while True:
        time.sleep(0.1)
"""
SILU_MUL_FAST = """
def kernel(gate, up):
    return F.silu(gate).mul_(up)
"""
# a sample kernel that picks the wrong token: changes what the model generates
SAMPLE_WRONG = """
def kernel(logits):
    return torch.argmin(logits, dim=-1)
"""
RMSNORM_TRITON = '''
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(X, W, Y, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, x * rstd * w, mask=mask)


def kernel(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _rmsnorm[(x2.shape[0],)](x2, weight, y, x2.stride(0), x2.shape[1], eps,
                             BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
'''
# a region candidate: the whole MLP block with one GEMM for gate and up (weights stacked per call)
MLP_BLOCK_FUSED = """import torch
import torch.nn.functional as F
REGION = "mlp_block"
BACKEND = "torch"


def kernel(module, x):
    gate, up = F.linear(x, torch.cat([module.w1, module.w3])).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, module.w2)
"""
