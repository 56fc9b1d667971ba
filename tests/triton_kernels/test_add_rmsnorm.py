"""add_rmsnorm candidates under the Triton interpreter: both outputs, inputs untouched, odd shapes."""

from __future__ import annotations

import pytest
import torch

from services.agent_pool.library.triton import render
from tests.triton_kernels import reference
from tests.triton_kernels.conftest import Loader
from tests.triton_kernels.reference import DTYPES, SHAPES
from tests.triton_kernels.reference import NORM_VARIANTS as VARIANTS


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(load: Loader, variant: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    mod = load(render("add_rmsnorm", VARIANTS[variant]))
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    r = torch.randn(shape, dtype=dtype) * 4
    w = torch.randn(shape[-1], dtype=dtype)
    x0, r0, w0 = x.clone(), r.clone(), w.clone()
    y, h = mod.kernel(x, r, w, 1e-5)
    y_ref, h_ref = reference.add_rmsnorm(x, r, w, 1e-5)
    assert y.dtype == h.dtype == dtype and y.shape == h.shape == x.shape
    torch.testing.assert_close(h, h_ref, **reference.TOL[dtype])
    torch.testing.assert_close(y, y_ref, **reference.TOL[dtype])
    assert torch.equal(x, x0) and torch.equal(r, r0) and torch.equal(w, w0), "inputs were modified"
    assert h.data_ptr() not in (x.data_ptr(), r.data_ptr()), "the sum must be a new tensor"


@pytest.mark.parametrize(
    "params", [{}, {"BLOCK_E": "1024", "ROWS_PER_PROGRAM": "2"}], ids=["whole", "chunk1024"]
)
def test_wide_row_with_ragged_tail(load: Loader, params: dict[str, str]) -> None:
    mod = load(render("add_rmsnorm", params))
    torch.manual_seed(1)
    x, r, w = torch.randn(3, 4096 + 33), torch.randn(3, 4096 + 33), torch.randn(4096 + 33)
    y, h = mod.kernel(x, r, w, 1e-6)
    y_ref, h_ref = reference.add_rmsnorm(x, r, w, 1e-6)
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(y, y_ref, **reference.TOL[torch.float32])


def test_strided_inputs_and_shape_errors(load: Loader) -> None:
    mod = load(render("add_rmsnorm", VARIANTS["chunk64-rows2"]))
    torch.manual_seed(2)
    base = torch.randn(5, 2 * 200, dtype=torch.bfloat16)
    x, r = base[:, :200], base[:, 200:]  # two halves of one buffer, rows 400 apart
    w = torch.randn(200, dtype=torch.bfloat16)
    base0 = base.clone()
    y, h = mod.kernel(x, r, w, 1e-6)
    y_ref, h_ref = reference.add_rmsnorm(x, r, w, 1e-6)
    torch.testing.assert_close(h, h_ref, **reference.TOL[torch.bfloat16])
    torch.testing.assert_close(y, y_ref, **reference.TOL[torch.bfloat16])
    assert torch.equal(base, base0)
    with pytest.raises(ValueError, match="residual"):
        mod.kernel(x, r[:4], w, 1e-6)
    y0, h0 = mod.kernel(torch.empty(0, 200), torch.empty(0, 200), torch.ones(200), 1e-6)
    assert y0.shape == h0.shape == (0, 200)
