"""Per-slot input generators: realistic random inputs for a shape bucket and a model config.

A bucket (phase, batch, context) becomes one or more call sites per slot: `linear` is called with
the qkv, output, MLP and LM-head weights, `rope` with q and k heads. Each site carries how many
times a forward step calls it, so a benchmark can weight sites the way the model runs them. Values
are never zeros (a kernel that ignores its input must not pass by accident) and odd shapes are fine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from services.common.shapes import Shape
from services.engine_host.models.llama import ModelArgs, precompute_freqs_cis


@dataclass
class CallSite:
    name: str  # e.g. "linear.wqkv"
    count: int  # calls per forward step
    args: tuple[Any, ...]


def resolve(shape: Shape, args: ModelArgs, *, max_batch: int, max_tokens: int) -> Shape:
    """Clamp a requested bucket to what this model and box can run (context ≤ max_seq, B·S ≤ max_tokens)."""
    batch = min(shape.batch, max_batch)
    context = min(shape.context, args.max_seq_len)
    if shape.phase == "prefill" and batch * context > max_tokens:
        batch = max(1, max_tokens // context)
        context = min(context, max_tokens)
    return Shape(shape.phase, batch, context, shape.weight)


def _randn(shape: tuple[int, ...], gen: torch.Generator, dtype: torch.dtype, scale: float = 1.0,
           shift: float = 0.0, outliers: float = 0.0) -> Tensor:
    """N(shift, scale²); with `outliers`, about 1 % of the values are that many times larger, as real
    activations have (a kernel that overflows or loses precision on them fails)."""
    t = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32)
    if outliers:
        hit = torch.rand(shape, generator=gen, device=gen.device) < 0.01
        t = torch.where(hit, t * outliers, t)
    return (t * scale + shift).to(dtype)


def _tied(logits: Tensor, gen: torch.Generator) -> Tensor:
    """Logits whose maximum is tied in every row at a random later position (the contract: lowest index)."""
    B, V = logits.shape
    top = logits.argmax(-1)
    other = (top + 1 + torch.randint(0, V - 1, (B,), generator=gen, device=gen.device)) % V
    rows = torch.arange(B, device=logits.device)
    low, high = torch.minimum(top, other), torch.maximum(top, other)
    logits[rows, high] = logits[rows, low] = logits[rows, top]
    return logits


def _freqs(args: ModelArgs, positions: Tensor) -> Tensor:
    return precompute_freqs_cis(args.max_seq_len, args.head_dim, args.rope_base).to(positions.device)[positions]


def _mask(shape: Shape, device: torch.device) -> Tensor:
    # [1,1,S,T] bool: new token i sits at position T-S+i and attends to every position ≤ it
    S, T = shape.new_tokens, shape.context
    rows = torch.arange(T - S, T, device=device)[:, None]
    return (torch.arange(T, device=device)[None, :] <= rows)[None, None]


def call_sites(slot: str, shape: Shape, args: ModelArgs, gen: torch.Generator,
               stress: bool = False) -> list[CallSite]:
    """Fresh random inputs for every call site of `slot` at `shape` (drawn from `gen`). `stress`: the
    activations carry outliers up to ~100x their spread and `sample` gets tied maxima."""
    dt, device = args.torch_dtype, gen.device
    out = 60.0 if stress else 0.0
    B, S, T, E, D = shape.batch, shape.new_tokens, shape.context, args.dim, args.head_dim
    Hq, Hkv, F, V, L = args.n_heads, args.n_kv_heads, args.intermediate_size, args.vocab_size, args.n_layers

    def w(n: int, k: int) -> Tensor:
        return _randn((n, k), gen, dt, 1.0 / math.sqrt(k))

    def norm_w() -> Tensor:
        return _randn((E,), gen, dt, 0.1, 1.0)

    if slot == "rmsnorm":
        return [CallSite("rmsnorm", L + 1, (_randn((B, S, E), gen, dt, 2.0, outliers=out), norm_w(), args.norm_eps))]
    if slot == "add_rmsnorm":
        x, res = _randn((B, S, E), gen, dt, outliers=out), _randn((B, S, E), gen, dt, 2.0, outliers=out)
        return [CallSite("add_rmsnorm", L, (x, res, norm_w(), args.norm_eps))]
    if slot == "rope":
        positions = torch.arange(T - S, T, device=device)
        return [
            CallSite("rope.q", L, (_randn((B, S, Hq, D), gen, dt, outliers=out), _freqs(args, positions))),
            CallSite("rope.k", L, (_randn((B, S, Hkv, D), gen, dt, outliers=out), _freqs(args, positions))),
        ]
    if slot == "attention":
        # stress: scores of a few hundred (q·k of outliers), the case max-subtraction exists for
        q, k, v = (_randn((B, h, n, D), gen, dt, outliers=out) for h, n in ((Hq, S), (Hkv, T), (Hkv, T)))
        return [CallSite("attention", L, (q, k, v, _mask(shape, device)))]
    if slot == "silu_mul":
        return [CallSite("silu_mul", L, (_randn((B, S, F), gen, dt, 2.0, outliers=out),
                                         _randn((B, S, F), gen, dt, outliers=out)))]
    if slot == "linear":
        return [
            CallSite("linear.wqkv", L, (_randn((B, S, E), gen, dt, outliers=out), w(args.qkv_dim, E))),
            CallSite("linear.wo", L, (_randn((B, S, Hq * D), gen, dt), w(E, Hq * D))),
            CallSite("linear.w1_w3", 2 * L, (_randn((B, S, E), gen, dt), w(F, E))),
            CallSite("linear.w2", L, (_randn((B, S, F), gen, dt), w(E, F))),
            CallSite("linear.lm_head", 1, (_randn((B, 1, E), gen, dt), w(V, E))),
        ]
    if slot == "sample":
        logits = _randn((B, V), gen, torch.float32, args.logit_scale)
        return [CallSite("sample", 1, (_tied(logits, gen) if stress else logits,))]
    raise KeyError(f"no input generator for slot {slot!r}")


def clone_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
