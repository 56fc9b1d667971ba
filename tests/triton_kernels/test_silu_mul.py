"""silu_mul candidates under the Triton interpreter: column tails, rows per program, strided halves."""

from __future__ import annotations

import pytest
import torch

from services.agent_pool.library.triton import render
from tests.triton_kernels import reference
from tests.triton_kernels.conftest import Loader
from tests.triton_kernels.reference import DTYPES, SHAPES

VARIANTS = {
    "default": {},
    # blocks of 64 columns: several column programs per row and a ragged last block
    "block64-rows4": {"BLOCK_I": "64", "ROWS_PER_PROGRAM": "4", "NUM_WARPS": "1"},
    "block256-rows2-w2": {"BLOCK_I": "256", "ROWS_PER_PROGRAM": "2", "NUM_WARPS": "2"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(load: Loader, variant: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    mod = load(render("silu_mul", VARIANTS[variant]))
    torch.manual_seed(0)
    gate = torch.randn(shape, dtype=dtype) * 4  # reaches silu's saturated tails on both sides
    up = torch.randn(shape, dtype=dtype)
    g0, u0 = gate.clone(), up.clone()
    y = mod.kernel(gate, up)
    assert y.shape == gate.shape and y.dtype == dtype
    torch.testing.assert_close(y, reference.silu_mul(gate, up), **reference.TOL[dtype])
    assert torch.equal(gate, g0) and torch.equal(up, u0), "inputs were modified"


def test_halves_of_a_fused_projection(load: Loader) -> None:
    # gate and up as the two halves of one [.., 2I] output: strided rows, no copy needed
    mod = load(render("silu_mul", VARIANTS["block64-rows4"]))
    torch.manual_seed(1)
    gu = torch.randn(2, 3, 2 * 257, dtype=torch.bfloat16)
    gate, up = gu[..., :257], gu[..., 257:]
    gu0 = gu.clone()
    y = mod.kernel(gate, up)
    torch.testing.assert_close(y, reference.silu_mul(gate, up), **reference.TOL[torch.bfloat16])
    assert torch.equal(gu, gu0)
    assert y.is_contiguous()


def test_wide_rows_and_bad_shapes(load: Loader) -> None:
    mod = load(render("silu_mul", {}))
    torch.manual_seed(2)
    gate, up = torch.randn(2, 4096 + 33), torch.randn(2, 4096 + 33)
    torch.testing.assert_close(mod.kernel(gate, up), reference.silu_mul(gate, up))
    with pytest.raises(ValueError, match="up shape"):
        mod.kernel(gate, up[:, :-1])
    assert mod.kernel(torch.empty(0, 7), torch.empty(0, 7)).shape == (0, 7)
