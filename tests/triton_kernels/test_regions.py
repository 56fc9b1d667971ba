"""The fused region candidates (mlp_block, attn_block) under the Triton interpreter, on a small Llama.

Each is checked against the module's own forward (the reference slots): block outputs, the KV-cache
rows attn_block writes, the fallbacks for prefill, the stacked-weight cache, and greedy tokens of a
whole model with both regions bound as their modules' forward (as the engine's op table installs a
region: `kernel(module, *args)` in place of the module's forward). The model gets its slots from a
plain namespace of the references, so these tests do not depend on the engine's table API.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

from services.agent_pool.library.triton import render
from services.engine_host.models.llama import Transformer, build_model, generate, model_args
from services.engine_host.slots import REFERENCES
from tests.triton_kernels.conftest import Loader

# relative error of a block output (norm-wise): the interpreter rounds to bfloat16 toward zero at each
# of the block's roundings, where torch rounds to nearest, so bfloat16 gets a wider bound
REL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 4e-2}
MLP = {"default": {}, "split3": {"UP_SPLIT_K": "3", "DOWN_SPLIT_K": "3", "UP_BLOCK_K": "32", "DOWN_BLOCK_K": "64"},
       "stacked": {"STACK": "1", "UP_BLOCK_N": "32", "DOWN_BLOCK_N": "8"},
       "split2-memset": {"DOWN_SPLIT_K": "2", "DOWN_BLOCK_K": "64", "COUNTERS": "0"}}
ATTN = {"default": {}, "split2": {"QKV_SPLIT_K": "2", "WO_SPLIT_K": "2", "BLOCK_K": "32", "ATTN_BLOCK_N": "16",
                                  "ATTN_SPLITS": "3", "QKV_BLOCK_N": "32"}}


def small_model(dtype: torch.dtype, n_layers: int = 1) -> Transformer:
    # llama-tiny made smaller and odder: 6 query heads over 2 kv heads (GQA 3), I = 200, head dim 16
    args = replace(model_args("llama-tiny", n_layers=n_layers, dtype=str(dtype).removeprefix("torch.")),
                   dim=96, intermediate_size=200, n_heads=6, n_kv_heads=2, head_dim=16, vocab_size=64)
    return build_model(args, reference_slots(), seed=0, max_batch=4, max_seq=80)  # type: ignore[arg-type]


def reference_slots() -> types.SimpleNamespace:
    """What the model calls its ops through: here every slot on its reference (`attach` for a table
    API that registers the model with its table)."""
    return types.SimpleNamespace(**REFERENCES, attach=lambda model: None)


def install(model: nn.Module, kind: type[nn.Module], kernel: Callable[..., Any]) -> None:
    """Bind a region kernel as the forward of every module of its type, as the engine does."""
    for module in model.modules():
        if type(module) is kind:
            module.forward = types.MethodType(lambda mod, *args: kernel(mod, *args), module)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.isfinite(got).all()
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


@pytest.mark.parametrize("variant", sorted(MLP))
@pytest.mark.parametrize("dtype", list(REL), ids=str)
def test_mlp_block_matches_the_modules_forward(load: Loader, variant: str, dtype: torch.dtype) -> None:
    mod = load(render("mlp_block", MLP[variant]))
    ff = small_model(dtype).layers[0].feed_forward
    for rows in ((1, 1), (3, 1), (2, 5)):  # decode batches and a short prefill: all are rows to a GEMV
        x = torch.randn(*rows, 96).to(dtype)
        assert rel_err(mod.kernel(ff, x), type(ff).forward(ff, x)) < REL[dtype], rows


def test_mlp_block_stacked_weight_is_built_once_and_follows_the_weights(load: Loader) -> None:
    mod = load(render("mlp_block", MLP["stacked"]))
    ff = small_model(torch.float32).layers[0].feed_forward
    x = torch.randn(2, 1, 96)
    mod.kernel(ff, x)
    held = ff.polymorph_stacked_w13
    mod.kernel(ff, torch.randn(1, 1, 96))
    assert ff.polymorph_stacked_w13 is held, "rebuilt on a call with the same weights"
    with torch.no_grad():
        ff.w3.normal_()  # refilled in place: same storage, new version
    assert rel_err(mod.kernel(ff, x), type(ff).forward(ff, x)) < 1e-5
    assert ff.polymorph_stacked_w13 is not held


def test_mlp_block_many_rows_take_the_modules_forward(load: Loader) -> None:
    mod = load(render("mlp_block", {}))
    ff = small_model(torch.float32).layers[0].feed_forward
    x = torch.randn(3, 7, 96)  # 21 rows > MAX_M
    assert torch.equal(mod.kernel(ff, x), type(ff).forward(ff, x))


def _attn_call(model: Transformer, B: int, pos: int, dtype: torch.dtype) -> tuple:
    attn = model.layers[0].attention
    assert attn.kv_cache is not None and model.freqs_cis is not None and model.causal_mask is not None
    for cache in (attn.kv_cache.k_cache, attn.kv_cache.v_cache):
        cache.copy_(torch.randn(cache.shape).to(dtype))  # earlier context: random, not zeros
    input_pos = torch.tensor([pos])
    mask = model.causal_mask[None, None, input_pos, : model.max_seq]  # the CUDA-graph call: whole cache
    x = torch.randn(B, 1, model.args.dim).to(dtype)
    return attn, (x, model.freqs_cis[input_pos], mask, input_pos, model.max_seq)


@pytest.mark.parametrize("variant", sorted(ATTN))
@pytest.mark.parametrize("dtype", list(REL), ids=str)
def test_attn_block_matches_the_modules_forward(load: Loader, variant: str, dtype: torch.dtype) -> None:
    mod = load(render("attn_block", ATTN[variant]))
    model = small_model(dtype)
    for B, pos in ((1, 50), (3, 79), (2, 0)):
        attn, args = _attn_call(model, B, pos, dtype)
        assert attn.kv_cache is not None
        caches = (attn.kv_cache.k_cache, attn.kv_cache.v_cache)
        before = [c.clone() for c in caches]
        got = mod.kernel(attn, *args)
        got_caches = [c.clone() for c in caches]
        for c, b in zip(caches, before, strict=True):
            c.copy_(b)
        want = type(attn).forward(attn, *args)
        assert rel_err(got, want) < REL[dtype], (B, pos)
        for g, w in zip(got_caches, caches, strict=True):  # the new k/v row, and nothing else, written
            assert rel_err(g[:B, :, pos], w[:B, :, pos]) < REL[dtype]
            g[:B, :, pos] = w[:B, :, pos]
            assert torch.equal(g, w), "wrote outside the current position"


def test_attn_block_prefill_takes_the_modules_forward(load: Loader) -> None:
    mod = load(render("attn_block", {}))
    model = small_model(torch.float32)
    attn = model.layers[0].attention
    assert model.freqs_cis is not None and model.causal_mask is not None and attn.kv_cache is not None
    input_pos = torch.arange(6)
    args = (torch.randn(2, 6, 96), model.freqs_cis[input_pos], model.causal_mask[None, None, input_pos, :6],
            input_pos, 6)
    got = mod.kernel(attn, *args)
    k_got = attn.kv_cache.k_cache.clone()
    assert torch.equal(got, type(attn).forward(attn, *args))
    assert torch.equal(k_got, attn.kv_cache.k_cache)


LAYER = {"default": {}, "split": {"QKV_SPLIT_K": "2", "WO_SPLIT_K": "3", "UP_SPLIT_K": "2", "DOWN_SPLIT_K": "2",
                                  "QKV_BLOCK_K": "32", "WO_BLOCK_K": "32", "UP_BLOCK_K": "32", "DOWN_BLOCK_K": "64",
                                  "ATTN_BLOCK_N": "16", "COUNTERS": "0"},
         # batches above WIDE_M take the wide (batch-decode) tiles: B = 3 here
         "wide": {"MAX_M": "64", "WIDE_M": "2", "QKV_WIDE_BLOCK_K": "32", "WO_WIDE_BLOCK_K": "32",
                  "UP_WIDE_BLOCK_K": "32", "UP_WIDE_BLOCK_N": "16", "DOWN_WIDE_BLOCK_K": "64",
                  "DOWN_WIDE_SPLIT_K": "2"}}


@pytest.mark.parametrize("variant", sorted(LAYER))
@pytest.mark.parametrize("dtype", list(REL), ids=str)
def test_layer_matches_the_blocks_forward(load: Loader, variant: str, dtype: torch.dtype) -> None:
    mod = load(render("layer", LAYER[variant]))
    model = small_model(dtype)
    block = model.layers[0]
    for B, pos in ((1, 50), (3, 79)):
        attn, (x, *rest) = _attn_call(model, B, pos, dtype)
        assert attn.kv_cache is not None
        caches = (attn.kv_cache.k_cache, attn.kv_cache.v_cache)
        before = [c.clone() for c in caches]
        got = mod.kernel(block, x, *rest)
        got_caches = [c.clone() for c in caches]
        for c, b in zip(caches, before, strict=True):
            c.copy_(b)
        want = type(block).forward(block, x, *rest)
        assert rel_err(got, want) < REL[dtype], (B, pos)
        for g, w in zip(got_caches, caches, strict=True):
            assert rel_err(g[:B, :, pos], w[:B, :, pos]) < REL[dtype]


def test_layer_prefill_takes_the_blocks_forward(load: Loader) -> None:
    mod = load(render("layer", {}))
    model = small_model(torch.float32)
    block = model.layers[0]
    assert model.freqs_cis is not None and model.causal_mask is not None
    input_pos = torch.arange(6)
    args = (torch.randn(2, 6, 96), model.freqs_cis[input_pos], model.causal_mask[None, None, input_pos, :6],
            input_pos, 6)
    assert torch.equal(mod.kernel(block, *args), type(block).forward(block, *args))


def test_greedy_tokens_agree_with_both_regions_installed(load: Loader) -> None:
    model = small_model(torch.float32, n_layers=2)
    prompt = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(3))
    want_tokens, want_logits = generate(model, prompt, 3)
    layer = model.layers[0]
    install(model, type(layer.feed_forward), load(render("mlp_block", MLP["default"])).kernel)
    install(model, type(layer.attention), load(render("attn_block", ATTN["default"])).kernel)
    tokens, logits = generate(model, prompt, 3)
    assert torch.equal(tokens, want_tokens)
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-4)
    install(model, type(layer), load(render("layer", LAYER["default"])).kernel)  # over both: decode runs it alone
    tokens, logits = generate(model, prompt, 3)
    assert torch.equal(tokens, want_tokens)
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_regions_in_a_decode_cuda_graph_on_gpu(load: Loader) -> None:
    # one decode step of a 2-layer Llama-3.2-1B captured at the last cache position (as the engine's
    # graphs are) and replayed at a live position: tokens agree with the reference model's
    model = build_model(model_args("llama-3.2-1b", n_layers=2), reference_slots(), seed=0,  # type: ignore[arg-type]
                        device="cuda", max_batch=8, max_seq=256)
    prompt = torch.randint(0, model.args.vocab_size, (8, 100), device="cuda")
    with torch.inference_mode():
        want, _ = generate(model, prompt, 3)
        layer = model.layers[0]
        install(model, type(layer.feed_forward), load(render("mlp_block", {}), interpret=False).kernel)
        install(model, type(layer.attention), load(render("attn_block", {}), interpret=False).kernel)
        tokens = want[:, :1].clone()
        pos = torch.tensor([255], device="cuda")
        step = lambda: model(tokens, pos, kv_len=256)[:, -1].argmax(-1)  # noqa: E731
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # compile outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        generate(model.eval(), prompt, 1)  # the prompt's KV rows again (the capture wrote position 255)
        got = []
        for i in range(2):
            pos.fill_(100 + i)
            graph.replay()
            got.append(out.clone())
            tokens.copy_(out.view(-1, 1))
    assert torch.equal(torch.stack(got, dim=1), want[:, 1:3])
