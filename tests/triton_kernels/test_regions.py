"""The fused region candidates (mlp_block, attn_block) under the Triton interpreter, on a small Llama.

Each is checked against the module's own forward (the reference slots): block outputs, the KV-cache
rows attn_block writes, the fallbacks for prefill, the stacked-weight cache, and greedy tokens of a
whole model with both regions installed through the engine's RegionTable.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from services.agent_pool.library.triton import render
from services.engine_host.gpu_regions import RegionTable
from services.engine_host.models.llama import Transformer, build_model, generate, model_args
from services.engine_host.slots import SlotTable
from tests.triton_kernels.conftest import Loader

# relative error of a block output (norm-wise): the interpreter rounds to bfloat16 toward zero at each
# of the block's roundings, where torch rounds to nearest, so bfloat16 gets a wider bound
REL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 4e-2}
MLP = {"default": {}, "split3": {"UP_SPLIT_K": "3", "DOWN_SPLIT_K": "3", "UP_BLOCK_K": "32", "DOWN_BLOCK_K": "64"},
       "stacked": {"STACK": "1", "UP_BLOCK_N": "32", "DOWN_BLOCK_N": "8"}}
ATTN = {"default": {}, "split2": {"QKV_SPLIT_K": "2", "WO_SPLIT_K": "2", "BLOCK_K": "32", "ATTN_BLOCK_N": "16",
                                  "ATTN_SPLITS": "3", "QKV_BLOCK_N": "32"}}


def small_model(dtype: torch.dtype, n_layers: int = 1) -> Transformer:
    # llama-tiny made smaller and odder: 6 query heads over 2 kv heads (GQA 3), I = 200, head dim 16
    args = replace(model_args("llama-tiny", n_layers=n_layers, dtype=str(dtype).removeprefix("torch.")),
                   dim=96, intermediate_size=200, n_heads=6, n_kv_heads=2, head_dim=16, vocab_size=64)
    return build_model(args, SlotTable(), seed=0, max_batch=4, max_seq=80)


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


def test_greedy_tokens_agree_with_both_regions_installed(load: Loader) -> None:
    model = small_model(torch.float32, n_layers=2)
    prompt = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(3))
    want_tokens, want_logits = generate(model, prompt, 4)
    regions = RegionTable(model)
    regions.install("mlp_block", load(render("mlp_block", MLP["split3"])).kernel, "mlp")
    regions.install("attn_block", load(render("attn_block", ATTN["split2"])).kernel, "attn")
    tokens, logits = generate(model, prompt, 4)
    assert torch.equal(tokens, want_tokens)
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_regions_in_decode_cuda_graphs_on_gpu(load: Loader) -> None:
    from services.engine_host.cuda_graphs import DecodeGraphs, prefill

    table = SlotTable()
    model = build_model(model_args("llama-3.2-1b", n_layers=2), table, seed=0, device="cuda", max_batch=8,
                        max_seq=256)
    prompt = torch.randint(0, model.args.vocab_size, (8, 100), device="cuda")
    with torch.inference_mode():
        first = prefill(model, table.sample, prompt)
        ref = DecodeGraphs(model, table, [1, 8])
        want = [ref.step(first, 100 + i).clone() for i in range(4)]
        prefill(model, table.sample, prompt)
        regions = RegionTable(model)
        regions.install("mlp_block", load(render("mlp_block", {}), interpret=False).kernel, "mlp")
        regions.install("attn_block", load(render("attn_block", {}), interpret=False).kernel, "attn")
        graphs = DecodeGraphs(model, table, [1, 8], regions=regions)
        got = [graphs.step(first, 100 + i).clone() for i in range(4)]
    assert graphs.stats.replays == 4
    agree = sum(int(torch.equal(g, w)) for g, w in zip(got, want, strict=True))
    assert agree >= 3, (got, want)
