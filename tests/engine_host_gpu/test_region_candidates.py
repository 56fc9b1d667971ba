"""Region candidates from files: a fused block loaded, checked, timed, installed and decoded with.

CPU twins through an in-process Harness (eager, as production on a CPU); the same calls run through
the CUDA graphs on a GPU, where an install re-captures only the graphs that run the region. Regions
take the same paths as slots: Benchmark, RunOp, Generate overrides, Install, Rollback.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from services.common.shapes import Shape
from services.engine_host.harness_core import Harness
from services.engine_host.loader import LoadError, candidate_id, load_candidate
from services.engine_host.protocol import (
    Benchmark,
    CandidateCode,
    Generate,
    HarnessSpec,
    InputSource,
    Install,
    Rollback,
    RunOp,
    Status,
)
from tests.helpers import sandbox_relax

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
SHAPES = (Shape("decode", 2, 24, 0.6), Shape("prefill", 1, 16, 0.4))


def _harness(tmp_path: Path, device: str = "cpu") -> Harness:
    spec = HarnessSpec(tier="fast", model="llama-tiny", n_layers=2, seed=1, device=device, data_dir=str(tmp_path),
                       max_batch=4, max_seq=64, rounds=2, samples=2, target_sample_s=1e-4,
                       sandbox_relax=sandbox_relax())
    with torch.inference_mode():
        return Harness(spec, lambda _msg: None)


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


def _region_paths(h: Harness) -> None:
    cand = CandidateCode(candidate_id("mlp_block", FUSED_MLP), "mlp_block", FUSED_MLP)
    out = h.handle(Benchmark(cand, SHAPES))
    assert out.status == Status.OK, out
    assert out.incumbent_id == "reference" and out.speedup > 0 and out.checked_calls > 0
    assert set(out.per_item) == {"decode:b2:t24:mlp_block:0", "prefill:b1:t16:mlp_block:1"}
    wrong = h.handle(Benchmark(CandidateCode(candidate_id("mlp_block", WRONG_MLP), "mlp_block", WRONG_MLP), SHAPES))
    assert wrong.status == Status.WRONG_OUTPUT and "decode:b2:t24:mlp_block" in wrong.reason

    prompt = (3, 1, 4, 1, 5)
    want = h.handle(Generate(prompt, 5, reference_only=True)).tokens
    assert h.handle(Generate(prompt, 5, overrides=(cand,))).tokens == want  # in a sandbox of its own
    assert h.info().ops["mlp_block"] == "reference"
    swapped = h.handle(Install(cand))
    assert swapped.status == Status.OK and swapped.previous_id == "reference"
    assert h.info().ops["mlp_block"] == cand.candidate_id
    assert h.handle(Generate(prompt, 5)).tokens == want  # the live engine, the region installed
    runs = h.handle(RunOp("mlp_block", cand, InputSource.RANDOM, SHAPES, seed=3, repeats=20))
    assert runs.status == Status.OK and runs.runs and runs.extra_calls >= 20 and not runs.extra_failure
    assert h.handle(Rollback("mlp_block")).previous_id == cand.candidate_id
    assert h.info().ops["mlp_block"] == "reference"


def test_a_fused_mlp_region_is_checked_timed_installed_and_decoded_with(tmp_path: Path) -> None:
    h = _harness(tmp_path)
    try:
        with torch.inference_mode():
            _region_paths(h)
    finally:
        h.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_region_candidates_run_through_the_cuda_graphs(tmp_path: Path) -> None:
    h = _harness(tmp_path, "cuda")
    try:
        with torch.inference_mode():
            _region_paths(h)
    finally:
        h.close()
