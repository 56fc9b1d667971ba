"""llama-tiny and the op table, in process: consistency, determinism, swaps, regions, input generators."""

from __future__ import annotations

import pytest
import torch

from services.common.shapes import Shape, ShapeError
from services.common.slot_specs import SLOTS
from services.engine_host.inputs import call_sites, resolve
from services.engine_host.models.llama import build_model, generate, model_args
from services.engine_host.ops import OpTable, UnknownOp
from services.engine_host.slots import REFERENCES

ARGS = model_args("llama-tiny")


def _model(seed: int = 0, n_layers: int | None = None):
    return build_model(model_args("llama-tiny", n_layers), OpTable(), seed=seed, max_batch=4)


def _prompt(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, ARGS.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.inference_mode()
def test_decode_matches_prefill_and_batch_rows_are_independent() -> None:
    model, tokens = _model(), _prompt(2, 24)
    full = model(tokens, torch.arange(24))  # [2,24,V]
    steps = [model(tokens[:, :16], torch.arange(16))]
    steps += [model(tokens[:, i : i + 1], torch.tensor([i])) for i in range(16, 24)]
    incremental = torch.cat(steps, dim=1)
    torch.testing.assert_close(incremental, full, atol=1e-4, rtol=1e-4)
    alone = model(tokens[1:], torch.arange(24))
    torch.testing.assert_close(alone, full[1:], atol=1e-4, rtol=1e-4)
    assert 1.0 < float(full.std()) < 20.0  # sane logits


@torch.inference_mode()
def test_weights_are_seeded_and_the_fast_tier_holds_the_first_layers() -> None:
    a, b, other = _model(seed=3), _model(seed=3), _model(seed=4)
    tokens = _prompt(1, 8)
    assert torch.equal(a(tokens, torch.arange(8)), b(tokens, torch.arange(8)))
    assert not torch.allclose(a(tokens, torch.arange(8)), other(tokens, torch.arange(8)))
    fast = _model(seed=3, n_layers=2)
    assert len(fast.layers) == 2
    assert torch.equal(fast.layers[1].feed_forward.w2, a.layers[1].feed_forward.w2)
    assert torch.equal(fast.output, a.output)


@torch.inference_mode()
def test_greedy_generation_is_not_degenerate() -> None:
    tokens, logits = generate(_model(), _prompt(1, 12), steps=24)
    assert tokens.shape == (1, 24) and logits.shape == (1, 24, ARGS.vocab_size)
    assert len(set(tokens[0].tolist())) > 6
    assert torch.equal(logits[0].argmax(-1), tokens[0])


@torch.inference_mode()
def test_swap_changes_the_forward_and_rollback_restores_it() -> None:
    model, tokens = _model(), _prompt(1, 8)
    table = model.slots
    before = model(tokens, torch.arange(8))
    version = table.version
    assert table.swap("silu_mul", lambda gate, up: torch.relu(gate) * up, "relu-mul") == "reference"
    assert table.installed_id("silu_mul") == "relu-mul" and table.version > version
    changed = model(tokens, torch.arange(8))
    assert not torch.allclose(changed, before)
    assert table.rollback("silu_mul") == "relu-mul"
    assert torch.equal(model(tokens, torch.arange(8)), before)
    assert table.rollback("silu_mul", "relu-mul") == "reference"  # a held op can come back by id
    with table.reference_only():
        assert table.installed_id("silu_mul") == "reference"
    assert table.installed_id("silu_mul") == "relu-mul"
    with pytest.raises(KeyError):
        table.rollback("silu_mul", "never-held")
    with pytest.raises(UnknownOp):
        table.swap("nope", lambda x: x, "x")


@torch.inference_mode()
def test_a_region_swaps_through_the_same_table_and_rolls_back() -> None:
    model, tokens = _model(), _prompt(1, 8)
    table = model.slots
    before = model(tokens, torch.arange(8))
    version = table.versions["mlp_block"]
    table.swap("mlp_block", lambda module, x: torch.zeros_like(x), "zero-mlp")
    assert table.installed_id("mlp_block") == "zero-mlp" and table.versions["mlp_block"] == version + 1
    assert not torch.allclose(model(tokens, torch.arange(8)), before)
    with table.reference_only():
        assert torch.equal(model(tokens, torch.arange(8)), before)
    assert table.rollback("mlp_block") == "zero-mlp"
    assert torch.equal(model(tokens, torch.arange(8)), before)
    version = table.versions["mlp_block"]
    assert table.rollback("mlp_block") == "reference" and table.versions["mlp_block"] == version  # a no-op


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("slot", sorted(SLOTS))
def test_input_generators_match_the_slot_signatures(slot: str, phase: str) -> None:
    shape = resolve(Shape(phase, 3, 37), ARGS, max_batch=32, max_tokens=2048)
    sites = call_sites(slot, shape, ARGS, torch.Generator().manual_seed(0))
    assert sites
    for site in sites:
        assert len(site.args) == len(SLOTS[slot].params)
        for arg in site.args:
            if isinstance(arg, torch.Tensor) and arg.is_floating_point():
                assert arg.abs().sum() > 0 and torch.isfinite(arg).all()
        out = REFERENCES[slot](*site.args)
        first = out[0] if isinstance(out, tuple) else out
        assert first.shape[0] == 3  # batch 3 everywhere
        assert torch.isfinite(first.float()).all()


def test_buckets_are_clamped_to_what_the_model_runs() -> None:
    assert resolve(Shape("decode", 2, 100_000), ARGS, max_batch=32, max_tokens=2048).context == ARGS.max_seq_len
    big = resolve(Shape("prefill", 64, 512), ARGS, max_batch=32, max_tokens=2048)
    assert big.batch * big.new_tokens <= 2048 and big.batch >= 1
    with pytest.raises(ShapeError):
        Shape("sideways", 1, 1)
