"""Region candidates from files: a fused block loaded, checked, timed, installed and decoded with.

CPU twins through the worker Runtime (eager, as production on a CPU); the same calls run through the
CUDA graphs on a GPU, where an install re-captures only the graphs that run the region.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from services.engine_host.loader import LoadError, candidate_id, load_candidate
from services.engine_host.runtime import Runtime
from services.engine_host.worker import WorkerSpec

FUSED_MLP = textwrap.dedent('''
    import torch
    import torch.nn.functional as F

    REGION = "mlp_block"
    BACKEND = "torch"


    def kernel(module, x):
        """One GEMM for gate and up together, then SiLU-gate and the down projection."""
        gate, up = F.linear(x, torch.cat([module.w1, module.w3])).chunk(2, dim=-1)
        return F.linear(F.silu(gate.float()).to(x.dtype) * up, module.w2)
''')
WRONG_MLP = FUSED_MLP.replace("module.w2)", "module.w2) * 1.5")
SHAPES = [("decode", 2, 24, 0.6), ("prefill", 1, 16, 0.4)]


def _runtime(tmp_path: Path, device: str = "cpu") -> Runtime:
    spec = WorkerSpec(tier="fast", model="llama-tiny", n_layers=2, seed=1, device=device, data_dir=str(tmp_path),
                      max_batch=4, max_seq=64, rounds=2, samples=2, target_sample_s=1e-4)
    return Runtime(spec, lambda _msg: None)


def test_the_loader_takes_region_candidates_and_says_what_is_wrong(tmp_path: Path) -> None:
    cand = load_candidate(FUSED_MLP, "mlp_block", tmp_path)
    assert cand.slot == "mlp_block" and cand.candidate_id == candidate_id("mlp_block", FUSED_MLP)
    with pytest.raises(LoadError, match="REGION = 'mlp_block' but the candidate was proposed for region 'layer'"):
        load_candidate(FUSED_MLP, "layer", tmp_path)
    with pytest.raises(LoadError, match="defines no REGION"):
        load_candidate("SLOT = 'rmsnorm'\nBACKEND = 'torch'\ndef kernel(x, w, eps):\n    return x\n", "mlp_block",
                       tmp_path)
    with pytest.raises(LoadError, match="cannot be called as kernel"):
        load_candidate(FUSED_MLP.replace("def kernel(module, x)", "def kernel(x)"), "mlp_block", tmp_path)
    with pytest.raises(LoadError, match="unknown slot"):
        load_candidate(FUSED_MLP, "mlp", tmp_path)


def _region_paths(rt: Runtime) -> None:
    cid = candidate_id("mlp_block", FUSED_MLP)
    out = rt.benchmark(FUSED_MLP, "mlp_block", cid, SHAPES)
    assert out["status"] == "OK", out
    assert out["incumbent_id"] == "reference" and out["speedup"] > 0 and out["captured_sets_checked"] == 2
    assert set(out["per_item"]) == {"decode:b2:t24:mlp_block", "prefill:b1:t16:mlp_block"}
    wrong = rt.benchmark(WRONG_MLP, "mlp_block", candidate_id("mlp_block", WRONG_MLP), SHAPES)
    assert wrong["status"] == "WRONG_OUTPUT" and "decode:b2:t24:mlp_block" in wrong["reason"]

    prompt = [3, 1, 4, 1, 5]
    want = rt.generate(prompt, 5, [])["tokens"]
    assert rt.generate(prompt, 5, [(FUSED_MLP, "mlp_block", cid)])["tokens"] == want  # an override, restored
    assert rt.info()["regions"]["mlp_block"] == "reference"
    swapped = rt.swap(FUSED_MLP, "mlp_block", cid)
    assert swapped["status"] == "OK" and swapped["previous"] == "reference"
    assert rt.info()["regions"]["mlp_block"] == cid and rt.installed_id("mlp_block") == cid
    assert rt.generate(prompt, 5, [])["tokens"] == want
    assert rt.generate(prompt, 5, [], reference_only=True)["tokens"] == want
    assert rt.info()["regions"]["mlp_block"] == cid  # reference_only put it back afterwards
    assert rt.run_slot(FUSED_MLP, "mlp_block", cid, "random", SHAPES)["status"] == "LOAD_ERROR"
    assert rt.rollback("mlp_block")["previous"] == cid and rt.installed_id("mlp_block") == "reference"


def test_a_fused_mlp_region_is_checked_timed_installed_and_decoded_with(tmp_path: Path) -> None:
    _region_paths(_runtime(tmp_path))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_region_candidates_run_through_the_cuda_graphs(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, "cuda")
    assert rt.graphs is not None
    _region_paths(rt)
    assert rt.graphs.stats.replays > 0
