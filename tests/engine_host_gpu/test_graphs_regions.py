"""CPU twins of the GPU engine pieces: graph invalidation bookkeeping, regions, faults; GPU tests marked."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from services.engine_host.cuda_graphs import DecodeGraphs, buckets_for, decode
from services.engine_host.gpu_faults import DEVICE_FAULT_EXIT, is_device_fault, probe_device
from services.engine_host.models.llama import build_model, generate, model_args
from services.engine_host.ops import OpTable
from services.engine_host.slots import REFERENCES

gpu = pytest.mark.gpu


def _engine(device: str = "cpu", layers: int = 2):
    table = OpTable()
    model = build_model(model_args("llama-tiny", layers), table, seed=3, device=device, max_batch=4, max_seq=64)
    return model, table


def test_buckets() -> None:
    assert buckets_for(64) == [1, 2, 4, 8, 16, 32, 64]
    assert buckets_for(6) == [1, 2, 4, 6]


@torch.inference_mode()
def test_graph_decode_matches_generate_and_recaptures_only_stale_buckets() -> None:
    model, table = _engine()
    graphs = DecodeGraphs(model, table, [1, 4])
    prompt = torch.randint(0, model.args.vocab_size, (3, 9), generator=torch.Generator().manual_seed(0))
    got = decode(graphs, prompt, 6)
    want, _ = generate(model, prompt, 6)
    assert torch.equal(got, want)
    assert graphs.bucket(3) == 4 and graphs.stats.captures == 1 and list(graphs.captures) == [4]
    graphs.step(prompt[:1, 0], 20)
    assert graphs.stats.captures == 2 and graphs.invalid_buckets() == []
    table.swap("rmsnorm", lambda x, w, eps: REFERENCES["rmsnorm"](x, w, eps), "same-but-new")
    assert sorted(graphs.invalid_buckets()) == [1, 4]
    graphs.step(prompt[:1, 0], 20)  # lazily: only the bucket that runs again is re-captured
    assert graphs.stats.recaptured == [1] and graphs.invalid_buckets() == [4]
    # a slot swap can be warmed up on the slot's own recorded arguments; a region swap cannot
    old = graphs.captures[4]
    assert set(old.slot_args) == {"rmsnorm", "add_rmsnorm", "rope", "attention", "silu_mul", "linear", "sample"}
    assert graphs._changed_slots(old) == ["rmsnorm"]
    assert old.slot_args["rmsnorm"][0].shape == (4, 1, model.args.dim)
    with pytest.raises(ValueError):
        graphs.bucket(5)


@torch.inference_mode()
def test_region_replaces_block_and_unused_slot_swaps_leave_graphs_alone() -> None:
    model, table = _engine()
    graphs = DecodeGraphs(model, table, [2])
    tok = torch.tensor([5, 7])
    before = graphs.step(tok, 3).clone()
    calls = []

    def fused_mlp(module, x):
        calls.append(1)
        gate, up = F.linear(x, torch.cat([module.w1, module.w3])).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, module.w2)

    assert table.swap("mlp_block", fused_mlp, "fused") == "reference"
    assert graphs.invalid_buckets() == [2]
    after = graphs.step(tok, 3).clone()
    assert torch.equal(before, after) and calls  # same function, now through the fused region
    assert "mlp_block" in graphs.captures[2].versions
    assert "silu_mul" not in graphs.captures[2].versions  # the fused block never calls it
    n = graphs.stats.captures
    table.swap("silu_mul", REFERENCES["silu_mul"], "other")
    graphs.step(tok, 3)
    assert graphs.stats.captures == n  # silu_mul is not in this graph: nothing to re-capture
    table.rollback("mlp_block")
    graphs.step(tok, 3)
    assert graphs.stats.captures == n + 1 and "silu_mul" in graphs.captures[2].versions
    with pytest.raises(KeyError):
        table.swap("nope", fused_mlp, "x")


def test_fault_classification() -> None:
    assert is_device_fault("CUDA error: an illegal memory access was encountered")
    assert not is_device_fault("ValueError: shapes differ")
    assert probe_device() == "" and DEVICE_FAULT_EXIT not in (0, 1)


@gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@torch.inference_mode()
def test_cuda_graph_decode_matches_eager_on_gpu() -> None:
    model, table = _engine("cuda")
    graphs = DecodeGraphs(model, table, [1, 4])
    prompt = torch.randint(0, model.args.vocab_size, (4, 9), device="cuda")
    got = decode(graphs, prompt, 6)
    want, _ = generate(model, prompt, 6)
    assert graphs.stats.replays > 0 and torch.equal(got, want)
    # a swap re-captures with only the swapped op warmed up, and decodes the same tokens
    table.swap("rmsnorm", lambda x, w, eps: REFERENCES["rmsnorm"](x, w, eps), "same-but-new")
    again = decode(graphs, prompt, 6)
    assert graphs.stats.last["targeted_warmup"] and graphs.stats.last["warmed_slots"] == ["rmsnorm"]
    assert torch.equal(again, want)


@torch.inference_mode()
def test_padded_prefill_keeps_the_prompts_last_logits_and_decode_never_sees_the_padding() -> None:
    model, table = _engine()
    graphs = DecodeGraphs(model, table, [2])
    prompt = torch.randint(0, model.args.vocab_size, (2, 37), generator=torch.Generator().manual_seed(1))
    want = model(prompt, torch.arange(37), kv_len=37, last_only=True)[:, -1]
    token, logits = graphs.prefill.run(prompt)
    assert graphs.prefill.bucket_len(37) == 64  # padded: 27 positions of K/V written past the prompt
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(token, table.sample(want))
    # the padding's K/V sit where decode writes next; the tokens are the unpadded model's
    got = decode(graphs, prompt, 5)
    ref, _ = generate(model, prompt, 5)
    assert torch.equal(got, ref)
    # a prompt that fills its bucket (and the cache) exactly
    full = torch.randint(0, model.args.vocab_size, (1, 64), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(graphs.prefill.run(full)[1],
                               model(full, torch.arange(64), kv_len=64, last_only=True)[:, -1], rtol=1e-5, atol=1e-5)


@gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@torch.inference_mode()
def test_prefill_graphs_match_eager_and_recapture_after_a_swap_on_gpu() -> None:
    model, table = _engine("cuda")
    graphs = DecodeGraphs(model, table, [2])
    prompt = torch.randint(0, model.args.vocab_size, (2, 21), device="cuda")
    want = model(prompt, torch.arange(21, device="cuda"), kv_len=21, last_only=True)[:, -1]
    _, logits = graphs.prefill.run(prompt)
    torch.testing.assert_close(logits, want, rtol=1e-4, atol=1e-4)
    other = torch.randint(0, model.args.vocab_size, (2, 30), device="cuda")  # same bucket: a replay
    _, logits = graphs.prefill.run(other)
    torch.testing.assert_close(logits, model(other, torch.arange(30, device="cuda"), kv_len=30,
                                             last_only=True)[:, -1], rtol=1e-4, atol=1e-4)
    assert graphs.prefill.stats.captures == 1 and graphs.prefill.stats.replays == 2
    table.swap("rmsnorm", lambda x, w, eps: REFERENCES["rmsnorm"](x, w, eps), "same-but-new")
    graphs.prefill.run(other)
    assert graphs.prefill.stats.captures == 2 and graphs.prefill.stats.recaptured == [2]
    assert torch.equal(decode(graphs, prompt, 6), generate(model, prompt, 6)[0])
