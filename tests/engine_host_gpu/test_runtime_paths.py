"""The worker runtime's own paths: graphs in Generate/Profile/decode_rate, captured-input timing, hangs.

CPU tests run the Runtime in-process (eager, as production on a CPU); the GPU tests check that the
same calls go through CUDA graphs there and that a spinning Triton kernel is killed by the timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.engine_host.cuda_graphs import DecodeGraphs
from services.engine_host.cuda_graphs import generate as graph_generate
from services.engine_host.gpu_faults import hanging_triton_rmsnorm
from services.engine_host.loader import candidate_id
from services.engine_host.models.llama import build_model, generate, model_args
from services.engine_host.runtime import Runtime
from services.engine_host.slots import REFERENCES, SlotTable
from services.engine_host.worker import WorkerFailure, WorkerHandle, WorkerSpec
from tests.engine_host.candidates import RMSNORM_FAST, source

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SHAPES = [("decode", 2, 24, 0.6), ("prefill", 1, 16, 0.4)]


def _spec(tmp_path: Path, device: str, **kw) -> WorkerSpec:
    return WorkerSpec(tier="slow", model="llama-tiny", n_layers=None, seed=1, device=device, data_dir=str(tmp_path),
                      max_batch=4, rounds=2, samples=2, target_sample_s=1e-4, capture_shapes=tuple(SHAPES), **kw)


@torch.inference_mode()
def test_graph_generate_keeps_logits_and_a_recapture_never_touches_the_prompt() -> None:
    table = SlotTable()
    model = build_model(model_args("llama-tiny", 2), table, seed=3, max_batch=2, max_seq=48)
    graphs = DecodeGraphs(model, table, [1, 2])
    g = torch.Generator().manual_seed(0)
    first = torch.randint(0, model.args.vocab_size, (1, 5), generator=g)
    graph_generate(graphs, first, 4)  # leaves the bucket's static position at 7
    table.swap("rmsnorm", lambda x, w, eps: REFERENCES["rmsnorm"](x, w, eps), "same-but-new")
    prompt = torch.randint(0, model.args.vocab_size, (1, 20), generator=g)
    got, logits = graph_generate(graphs, prompt, 6)  # re-captures bucket 1 while the prompt is in the cache
    want, want_logits = generate(model, prompt, 6)
    assert graphs.stats.recaptured == [1]
    assert torch.equal(got, want) and torch.allclose(logits, want_logits, atol=1e-4)


@torch.inference_mode()
def test_the_real_data_tier_times_on_captured_and_random_inputs(tmp_path: Path) -> None:
    rt = Runtime(_spec(tmp_path, "cpu"), lambda _: None)
    assert rt.graphs is None  # the CPU stays eager
    src = source("rmsnorm", RMSNORM_FAST)
    out = rt.benchmark(src, "rmsnorm", candidate_id("rmsnorm", src), SHAPES)
    assert out["status"] == "OK", out
    assert set(out["per_group"]) == {"captured", "random"} and out["captured_sets_checked"] >= 2
    assert any(k.startswith("captured:") for k in out["per_item"])
    rate = rt.decode_rate(2, steps=2, blocks=1)
    assert rate["tok_s"] > 0 and not rate["graphs"]


@gpu
@needs_cuda
def test_runtime_paths_run_through_cuda_graphs(tmp_path: Path) -> None:
    with torch.inference_mode():
        rt = Runtime(_spec(tmp_path, "cuda", warm_buckets=(1,)), lambda _: None)
        assert rt.graphs is not None and rt.graphs.stats.replays == 1
        out = rt.generate([3, 5, 7, 9], 5, [], return_logits=True)
        assert out["status"] == "OK" and len(out["tokens"]) == 5 and rt.graphs.stats.replays >= 5
        prof = rt.profile([("decode", 2, 24, 1.0)])
        assert prof["graphs"] and prof["eager_step_us"]
        src = source("rmsnorm", RMSNORM_FAST)
        assert rt.swap(src, "rmsnorm", candidate_id("rmsnorm", src), warm=True)["status"] == "OK"
        rate = rt.decode_rate(2, steps=5, blocks=2)
        assert rate["graphs"] and rate["recaptured"] == 1 and rate["tok_s"] > 0
        bench = rt.benchmark(src, "rmsnorm", candidate_id("rmsnorm", "x" + src), SHAPES)
        assert bench["status"] == "OK" and "captured" in bench["per_group"]


@gpu
@needs_cuda
def test_a_spinning_triton_kernel_is_killed_by_the_timeout(tmp_path: Path) -> None:
    handle = WorkerHandle(_spec(tmp_path, "cuda"), 300.0)
    handle.start()
    try:
        src = hanging_triton_rmsnorm()
        with pytest.raises(WorkerFailure) as failure:
            handle.call("benchmark", 10.0, source=src, slot="rmsnorm", candidate_id=candidate_id("rmsnorm", src),
                        shapes=SHAPES)
        assert failure.value.status == "TIMEOUT" and not handle.alive
    finally:
        handle.kill()
