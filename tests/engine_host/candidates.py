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
# rope as one complex multiply instead of stacked real products: 4-8x on a CPU, a margin no load hides
ROPE_COMPLEX = """
def kernel(x, freqs_cis):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    fc = torch.view_as_complex(freqs_cis.contiguous()).view(1, xc.size(1), 1, xc.size(3))
    return torch.view_as_real(xc * fc).flatten(3).type_as(x)
"""
# a region candidate: the whole MLP block with one GEMM for gate and up (weights stacked per call)
MLP_BLOCK_FUSED = """import torch
import torch.nn.functional as F
REGION = "mlp_block"
BACKEND = "torch"


def kernel(module, x):
    gate, up = F.linear(x, torch.cat([module.w1, module.w3])).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, module.w2)
"""
# a region candidate that is genuinely faster on a CPU: rope as one complex multiply, and attention
# without the boolean mask where the mask says nothing more than "causal" (decode: every cached
# position; a prefill from position 0: is_causal), which lets SDPA take its fused kernels
ATTN_BLOCK_FAST = """import torch
import torch.nn.functional as F
REGION = "attn_block"
BACKEND = "torch"


def _rope(x, freqs_cis):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    fc = torch.view_as_complex(freqs_cis.contiguous()).view(1, xc.size(1), 1, xc.size(3))
    return torch.view_as_real(xc * fc).flatten(3).type_as(x)


def kernel(module, x, freqs_cis, mask, input_pos, kv_len):
    a = module.args
    B, S, _ = x.shape
    q, k, v = F.linear(x, module.wqkv).split([a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim,
                                               a.n_kv_heads * a.head_dim], dim=-1)
    q = _rope(q.view(B, S, a.n_heads, a.head_dim), freqs_cis).transpose(1, 2)
    k = _rope(k.view(B, S, a.n_kv_heads, a.head_dim), freqs_cis).transpose(1, 2)
    v = v.view(B, S, a.n_kv_heads, a.head_dim).transpose(1, 2)
    k_all, v_all = module.kv_cache.update(input_pos, k, v)
    k_all, v_all = k_all[:, :, :kv_len], v_all[:, :, :kv_len]
    gqa = a.n_heads != a.n_kv_heads
    if S == 1 and bool(mask.all()):
        y = F.scaled_dot_product_attention(q, k_all, v_all, enable_gqa=gqa)
    elif S == kv_len and int(input_pos[0]) == 0:
        y = F.scaled_dot_product_attention(q, k_all, v_all, is_causal=True, enable_gqa=gqa)
    else:
        y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, enable_gqa=gqa)
    return F.linear(y.transpose(1, 2).contiguous().view(B, S, a.n_heads * a.head_dim), module.wo)
"""
# caching by content: a few values of x as the key (cheap to compute, right whenever it hits)
RMSNORM_CONTENT_CACHE = """
class _Memo:
    def __init__(self):
        self.seen = {}

    def __call__(self, x, weight, eps):
        key = (tuple(x.shape), tuple(x.reshape(-1)[:8].tolist()))
        hit = self.seen.get(key)
        if hit is not None:
            return hit.clone()
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
        self.seen[key] = out
        return out


kernel = _Memo()
"""
# caching by address: the harness reuses its buffers, so this hits, with yesterday's result
RMSNORM_POINTER_CACHE = RMSNORM_CONTENT_CACHE.replace("(tuple(x.shape), tuple(x.reshape(-1)[:8].tolist()))",
                                                      "(x.data_ptr(), weight.data_ptr())")
# lazy: the result is written by a thread after the kernel has returned
RMSNORM_DEFERRED = """
import threading


def kernel(x, weight, eps):
    out = torch.empty_like(x)

    def fill():
        xf = x.float()
        out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight)

    threading.Timer(0.002, fill).start()
    return out
"""
