"""Llama, gpt-fast style: one readable file, a dataclass config, a preallocated static KV cache.

Every swappable op goes through the op table (`self.slots.<name>(...)`, ops.py), never torch directly, so
a swap between steps replaces it everywhere. Weights are random but deterministic: each parameter is
drawn from its own generator seeded by (seed, parameter name), so a model loaded with fewer layers
(the fast tier) holds exactly the first layers of the full model.

Shapes: B batch, S new tokens, T attended context, E dim, Hq/Hkv heads, D head dim, I MLP, V vocab.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from services.engine_host.ops import OpTable


@dataclass(frozen=True)
class ModelArgs:
    name: str
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    max_seq_len: int
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    dtype: str = "float32"  # the dtype the weights and activations use on the target device
    logit_scale: float = 4.0  # std of random logits: wide enough that greedy argmax has clear margins

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def qkv_dim(self) -> int:
        return (self.n_heads + 2 * self.n_kv_heads) * self.head_dim


CONFIGS: dict[str, ModelArgs] = {
    "llama-tiny": ModelArgs(
        name="llama-tiny", dim=256, n_layers=4, n_heads=8, n_kv_heads=4, head_dim=32,
        vocab_size=2048, intermediate_size=688, max_seq_len=512,
    ),
    "llama-3.2-1b": ModelArgs(
        name="llama-3.2-1b", dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, head_dim=64,
        vocab_size=128256, intermediate_size=8192, max_seq_len=8192, rope_base=500000.0,
        dtype="bfloat16",
    ),
    "llama-3.1-8b": ModelArgs(
        name="llama-3.1-8b", dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128,
        vocab_size=128256, intermediate_size=14336, max_seq_len=8192, rope_base=500000.0,
        dtype="bfloat16",
    ),
}


def model_args(name: str, n_layers: int | None = None, dtype: str | None = None) -> ModelArgs:
    """The config of a model in the zoo; `n_layers` loads only the first layers (the fast tier)."""
    if name not in CONFIGS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(CONFIGS))}")
    args = CONFIGS[name]
    if n_layers is not None:
        args = replace(args, n_layers=max(1, min(n_layers, args.n_layers)))
    if dtype is not None:
        args = replace(args, dtype=dtype)
    return args


def precompute_freqs_cis(max_seq: int, head_dim: int, base: float) -> Tensor:
    """[max_seq, D/2, 2] float32 (cos, sin) for interleaved-pair rotary embeddings."""
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32)[: head_dim // 2] / head_dim))
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), freqs)  # [max_seq, D/2]
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


class KVCache(nn.Module):
    k_cache: Tensor
    v_cache: Tensor

    def __init__(self, max_batch: int, max_seq: int, n_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str,
                 tensors: tuple[Tensor, Tensor] | None = None) -> None:
        """`tensors`: caches someone else owns (a harness shares them with a sandbox), else zeros."""
        super().__init__()
        shape = (max_batch, n_kv_heads, max_seq, head_dim)
        k, v = tensors if tensors is not None else (torch.zeros(shape, dtype=dtype, device=device),
                                                      torch.zeros(shape, dtype=dtype, device=device))
        if tuple(k.shape) != shape or tuple(v.shape) != shape:
            raise ValueError(f"KV cache tensors {tuple(k.shape)} do not match {shape}")
        self.register_buffer("k_cache", k, persistent=False)
        self.register_buffer("v_cache", v, persistent=False)

    def update(self, input_pos: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        # input_pos [S], k/v [B,Hkv,S,D] -> the whole cache rows of this batch [B,Hkv,max_seq,D]
        B = k.size(0)
        self.k_cache[:B, :, input_pos] = k
        self.v_cache[:B, :, input_pos] = v
        return self.k_cache[:B], self.v_cache[:B]


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, slots: OpTable) -> None:
        super().__init__()
        self.args, self.slots = args, slots
        self.wqkv = nn.Parameter(torch.empty(args.qkv_dim, args.dim), requires_grad=False)
        self.wo = nn.Parameter(torch.empty(args.dim, args.n_heads * args.head_dim), requires_grad=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor, kv_len: int) -> Tensor:
        a, s = self.args, self.slots
        B, S, _ = x.shape
        qkv = s.linear(x, self.wqkv)  # [B,S,(Hq+2Hkv)*D]
        q, k, v = qkv.split([a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim,
                             a.n_kv_heads * a.head_dim], dim=-1)
        q = s.rope(q.view(B, S, a.n_heads, a.head_dim), freqs_cis)  # [B,S,Hq,D]
        k = s.rope(k.view(B, S, a.n_kv_heads, a.head_dim), freqs_cis)  # [B,S,Hkv,D]
        v = v.view(B, S, a.n_kv_heads, a.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B,H,S,D]
        assert self.kv_cache is not None, "call setup_caches() first"
        k_all, v_all = self.kv_cache.update(input_pos, k, v)  # [B,Hkv,max_seq,D]
        y = s.attention(q, k_all[:, :, :kv_len], v_all[:, :, :kv_len], mask)  # [B,Hq,S,D]
        y = y.transpose(1, 2).contiguous().view(B, S, a.n_heads * a.head_dim)
        return s.linear(y, self.wo)  # [B,S,E]


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs, slots: OpTable) -> None:
        super().__init__()
        self.slots = slots
        self.w1 = nn.Parameter(torch.empty(args.intermediate_size, args.dim), requires_grad=False)
        self.w3 = nn.Parameter(torch.empty(args.intermediate_size, args.dim), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(args.dim, args.intermediate_size), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        s = self.slots
        return s.linear(s.silu_mul(s.linear(x, self.w1), s.linear(x, self.w3)), self.w2)  # [B,S,E]


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs, slots: OpTable) -> None:
        super().__init__()
        self.args, self.slots = args, slots
        self.attention = Attention(args, slots)
        self.feed_forward = FeedForward(args, slots)
        self.attention_norm = nn.Parameter(torch.empty(args.dim), requires_grad=False)
        self.ffn_norm = nn.Parameter(torch.empty(args.dim), requires_grad=False)

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor, kv_len: int) -> Tensor:
        s, eps = self.slots, self.args.norm_eps
        attn_out = self.attention(s.rmsnorm(x, self.attention_norm, eps), freqs_cis, mask, input_pos, kv_len)
        normed, h = s.add_rmsnorm(attn_out, x, self.ffn_norm, eps)  # h = x + attn_out
        return h + self.feed_forward(normed)  # [B,S,E]


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, slots: OpTable) -> None:
        super().__init__()
        self.args, self.slots = args, slots
        self.tok_embeddings = nn.Parameter(torch.empty(args.vocab_size, args.dim), requires_grad=False)
        self.layers = nn.ModuleList(TransformerBlock(args, slots) for _ in range(args.n_layers))
        self.norm = nn.Parameter(torch.empty(args.dim), requires_grad=False)
        self.output = nn.Parameter(torch.empty(args.vocab_size, args.dim), requires_grad=False)
        self.max_batch = 0
        self.freqs_cis: Tensor | None = None
        self.causal_mask: Tensor | None = None

    def setup_caches(self, max_batch: int, max_seq: int | None = None,
                     caches: list[tuple[Tensor, Tensor]] | None = None) -> None:
        """Preallocate every layer's KV cache, or adopt `caches` (one (k, v) per layer)."""
        a = self.args
        max_seq = min(max_seq or a.max_seq_len, a.max_seq_len)
        device = self.output.device
        self.max_batch, self.max_seq = max_batch, max_seq
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"{len(caches)} KV caches for {len(self.layers)} layers")
        for i, layer in enumerate(self.blocks()):
            layer.attention.kv_cache = KVCache(max_batch, max_seq, a.n_kv_heads, a.head_dim,
                                               self.output.dtype, device,
                                               caches[i] if caches is not None else None)
        self.freqs_cis = precompute_freqs_cis(max_seq, a.head_dim, a.rope_base).to(device)
        self.causal_mask = torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool, device=device))

    def blocks(self) -> list[TransformerBlock]:
        return [cast(TransformerBlock, layer) for layer in self.layers]

    def kv_cache(self, layer: int) -> KVCache:
        cache = self.blocks()[layer].attention.kv_cache
        if cache is None:
            raise RuntimeError("call setup_caches() first")
        return cache

    def forward(self, idx: Tensor, input_pos: Tensor, kv_len: int | None = None,
                last_only: bool | Tensor = False) -> Tensor:
        """idx [B,S] token ids at positions input_pos [S] -> logits [B,S,V] (or [B,1,V]) float32.

        last_only: True keeps the last position's logits; an int64 tensor [1] keeps the position it
        holds (a prefill graph pads the prompt to its bucket, so the prompt's last is not the last)."""
        assert self.freqs_cis is not None and self.causal_mask is not None, "call setup_caches() first"
        if idx.size(0) > self.max_batch:
            raise ValueError(f"batch {idx.size(0)} exceeds the cache's max batch {self.max_batch}")
        kv_len = kv_len if kv_len is not None else int(input_pos.max()) + 1
        mask = self.causal_mask[None, None, input_pos, :kv_len]  # [1,1,S,T]
        freqs_cis = self.freqs_cis[input_pos]  # [S,D/2,2]
        x = self.tok_embeddings[idx]  # [B,S,E]
        for layer in self.layers:
            x = layer(x, freqs_cis, mask, input_pos, kv_len)
        if isinstance(last_only, Tensor):
            x = x.index_select(1, last_only)
        elif last_only:
            x = x[:, -1:]
        x = self.slots.rmsnorm(x, self.norm, self.args.norm_eps)
        return self.slots.linear(x, self.output).float()  # [B,S,V]


def init_weights(model: Transformer, seed: int) -> None:
    """Seeded random weights scaled so activations stay O(1) and logits have std ~ logit_scale."""
    a = model.args
    for name, p in model.named_parameters():
        g = torch.Generator(device=p.device).manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
        with torch.no_grad():
            if p.dim() == 1:  # norm weights: near one, not exactly, so a kernel that drops them fails
                p.normal_(1.0, 0.1, generator=g)
            elif name == "tok_embeddings":
                p.normal_(0.0, 1.0, generator=g)
            elif name == "output":
                p.normal_(0.0, a.logit_scale / math.sqrt(a.dim), generator=g)
            else:
                p.normal_(0.0, 1.0 / math.sqrt(p.size(1)), generator=g)


def adopt_weights(model: Transformer, weights: dict[str, Tensor]) -> None:
    """Make every parameter the given tensor (as an nn.Parameter, the kind the live model holds)."""
    names = {name for name, _ in model.named_parameters()}
    if set(weights) != names:
        raise ValueError(f"weights differ from the model's parameters: missing {sorted(names - set(weights))[:3]}, "
                         f"unknown {sorted(set(weights) - names)[:3]}")
    for name, tensor in weights.items():
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)


def build_model(args: ModelArgs, slots: OpTable, *, seed: int, device: str = "cpu",
                max_batch: int = 8, max_seq: int | None = None, init: bool = True,
                weights: dict[str, Tensor] | None = None,
                caches: list[tuple[Tensor, Tensor]] | None = None) -> Transformer:
    """Allocate on the device, fill the seeded weights in the target dtype (unless `init` is False: a
    checkpoint will overwrite them), preallocate the caches. With `weights` (every parameter, by name)
    and `caches`, the model adopts tensors another process owns instead of allocating its own."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(args.torch_dtype)  # allocate in the target dtype: no fp32 copy of 8B weights
    try:
        with torch.device("meta" if weights is not None else device):
            model = Transformer(args, slots)
    finally:
        torch.set_default_dtype(previous)
    if weights is not None:
        adopt_weights(model, weights)
    elif init:
        init_weights(model, seed)
    model.setup_caches(max_batch, max_seq, caches)
    slots.attach(model)  # region entries bind to this model's blocks
    return model.eval()


@torch.inference_mode()
def generate(model: Transformer, prompt: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """Greedy: prompt [B,P] -> (tokens [B,steps] int64, logits [B,steps,V] float32 behind each token)."""
    B, P = prompt.shape
    if P + steps > model.max_seq:
        raise ValueError(f"prompt {P} + steps {steps} exceeds max_seq {model.max_seq}")
    device = prompt.device
    logits = model(prompt, torch.arange(P, device=device), kv_len=P, last_only=True)[:, -1]  # [B,V]
    tokens, all_logits = [], []
    for i in range(steps):
        token = model.slots.sample(logits)  # [B]
        tokens.append(token)
        all_logits.append(logits)
        if i + 1 == steps:
            break
        pos = P + i
        logits = model(token.view(B, 1), torch.tensor([pos], device=device), kv_len=pos + 1)[:, -1]
    return torch.stack(tokens, dim=1), torch.stack(all_logits, dim=1)
