"""rope candidates under the Triton interpreter: odd head counts and dims, q/k as views of one fused
QKV output, decode at a late position, every dtype."""

from __future__ import annotations

import pytest
import torch

from services.agent_pool.library.triton import render
from tests.triton_kernels import reference
from tests.triton_kernels.conftest import Loader
from tests.triton_kernels.reference import DTYPES

VARIANTS = {"default": {}, "one-head": {"BLOCK_H": "1"}, "heads4-w2": {"BLOCK_H": "4", "NUM_WARPS": "2"}}
# (B, S, H, D): 3 heads and 5 of 4 per program leave a ragged head block; D = 6 and 10 pad the pairs
SHAPES = [(2, 3, 5, 10), (1, 1, 8, 64), (3, 4, 3, 6)]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(load: Loader, variant: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    mod = load(render("rope", VARIANTS[variant]))
    _, S, _, D = shape
    torch.manual_seed(0)
    x = (torch.randn(shape) * 3).to(dtype)
    f = reference.freqs(torch.arange(S) + 17, D // 2)
    x0 = x.clone()
    y = mod.kernel(x, f)
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y, reference.rope(x, f), **reference.TOL[dtype])
    assert torch.equal(x, x0), "x was modified"


def test_q_and_k_as_views_of_one_fused_projection_at_a_late_decode_position(load: Loader) -> None:
    mod = load(render("rope", VARIANTS["heads4-w2"]))
    B, S, Hq, Hkv, D = 3, 1, 6, 2, 8
    torch.manual_seed(1)
    qkv = torch.randn(B, S, (Hq + 2 * Hkv) * D, dtype=torch.bfloat16)
    q = qkv[..., : Hq * D].view(B, S, Hq, D)  # rows strided by the whole projection
    k = qkv[..., Hq * D : (Hq + Hkv) * D].view(B, S, Hkv, D)
    f = reference.freqs(torch.tensor([100_000]), D // 2)
    before = qkv.clone()
    for t in (q, k):
        torch.testing.assert_close(mod.kernel(t, f), reference.rope(t, f), **reference.TOL[torch.bfloat16])
    assert torch.equal(qkv, before)


def test_bad_shapes_are_refused_and_empty_inputs_answered(load: Loader) -> None:
    mod = load(render("rope", {}))
    with pytest.raises(ValueError, match="even D"):
        mod.kernel(torch.randn(1, 2, 3, 5), reference.freqs(torch.arange(2), 2))
    with pytest.raises(ValueError, match="freqs_cis shape"):
        mod.kernel(torch.randn(1, 2, 3, 4), reference.freqs(torch.arange(3), 2))
    assert mod.kernel(torch.empty(0, 2, 3, 4), reference.freqs(torch.arange(2), 2)).shape == (0, 2, 3, 4)
