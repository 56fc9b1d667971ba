"""The slot contract every service shares: names, call signatures and what each returns.

The engine host owns the reference implementations (plain torch); agents generate candidates with
these signatures; the verifier checks candidates against them. No torch import here on purpose.

A candidate is the source text of a Python module:

    SLOT = "rmsnorm"
    BACKEND = "torch"          # "torch", "triton" or "compile"
    def kernel(x, weight, eps): ...

Shapes use: B batch, S new tokens this step (1 in decode), T cached context length,
Hq / Hkv query / kv heads, D head dim, E model dim, I MLP hidden dim, V vocab.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class SlotSignature:
    name: str
    params: tuple[str, ...]
    doc: str
    region: str  # the region it nests in: attn_block, mlp_block, layer or step
    # activation arguments (by position): every timed call gets fresh values in these, so no cache
    # keyed on them can hit; the others (weights, freqs, masks, eps) rotate through a few copies
    fresh: tuple[int, ...] = (0,)
    outputs: int = 1  # tensors the op returns (add_rmsnorm: 2)
    weights: tuple[int, ...] = ()  # arguments that are the model's nn.Parameters in the live model


SLOTS: dict[str, SlotSignature] = {
    s.name: s
    for s in (
        SlotSignature(
            "rmsnorm", ("x", "weight", "eps"),
            "x [B,S,E], weight [E], eps float -> [B,S,E] in x.dtype; "
            "x * rsqrt(mean(x^2) + eps) * weight, computed in float32", "layer", weights=(1,),
        ),
        SlotSignature(
            "add_rmsnorm", ("x", "residual", "weight", "eps"),
            "x [B,S,E], residual [B,S,E], weight [E], eps -> (rmsnorm(x + residual) [B,S,E], "
            "x + residual [B,S,E]); inputs are not modified", "layer", fresh=(0, 1), outputs=2, weights=(2,),
        ),
        SlotSignature(
            "rope", ("x", "freqs_cis"),
            "x [B,S,H,D], freqs_cis [S,D/2,2] float32 (cos, sin) -> [B,S,H,D] in x.dtype; "
            "rotates interleaved pairs (x[...,2i], x[...,2i+1]) as in gpt-fast", "attn_block",
        ),
        SlotSignature(
            "attention", ("q", "k", "v", "mask"),
            "q [B,Hq,S,D], k,v [B,Hkv,T,D] (Hq % Hkv == 0, grouped-query), mask [1 or B,1,S,T] bool "
            "(True = attend) -> [B,Hq,S,D]; softmax(q k^T / sqrt(D)) v", "attn_block",
        ),
        SlotSignature(
            "silu_mul", ("gate", "up"),
            "gate [B,S,I], up [B,S,I] -> silu(gate) * up [B,S,I]", "mlp_block", fresh=(0, 1),
        ),
        SlotSignature(
            "linear", ("x", "weight"),
            "x [...,K], weight [N,K] -> x @ weight^T [...,N] (every projection and the LM head)", "layer",
            weights=(1,),
        ),
        SlotSignature(
            "sample", ("logits",),
            "logits [B,V] -> greedy token ids [B] int64 (argmax, lowest index on ties)", "step",
        ),
    )
}

REGIONS = ("attn_block", "mlp_block", "layer", "step")
# A region candidate declares REGION = name and `kernel(module, *args)`: the module (its weights, KV
# cache, and for `step` the whole model) then the module's own forward arguments; it returns what that
# forward returns (mlp_block/attn_block/layer: [B,S,E]; step: float32 logits [B,S,V] or [B,1,V]; its
# last_only is a bool or an int64 tensor [1], the one position to keep: prefill graphs pad prompts).
REGION_PARAMS: dict[str, tuple[str, ...]] = {
    "mlp_block": ("module", "x"),
    "attn_block": ("module", "x", "freqs_cis", "mask", "input_pos", "kv_len"),
    "layer": ("module", "x", "freqs_cis", "mask", "input_pos", "kv_len"),
    "step": ("module", "idx", "input_pos", "kv_len", "last_only"),
}
assert set(REGION_PARAMS) == set(REGIONS)
BACKENDS = ("torch", "triton", "compile")


@dataclass(frozen=True)
class OpSpec:
    """A swappable op of either kind, as the engine's one op table sees it. For a region the
    positions count the module's forward arguments (the module itself is not one of them)."""

    name: str
    kind: str  # "slot" or "region"
    params: tuple[str, ...]  # what `kernel(...)` is called with (a region's start with "module")
    fresh: tuple[int, ...]
    outputs: int
    weights: tuple[int, ...] = ()


OPS: dict[str, OpSpec] = {
    **{s.name: OpSpec(s.name, "slot", s.params, s.fresh, s.outputs, s.weights) for s in SLOTS.values()},
    # region inputs: x is the activation (step: the token ids are; they are redrawn in range)
    **{r: OpSpec(r, "region", params, (0,), 1) for r, params in REGION_PARAMS.items()},
}


def candidate_id(slot: str, source: str) -> str:
    """The project-wide candidate id: a content hash of slot and source (dedup key on every subject)."""
    return hashlib.sha256(f"{slot}\n{source}".encode()).hexdigest()[:16]
