"""rmsnorm candidates under the Triton interpreter: odd shapes, three dtypes, whole-row and chunked tiles."""

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
    mod = load(render("rmsnorm", VARIANTS[variant]))
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype) * 3
    w = torch.randn(shape[-1], dtype=dtype)
    x0, w0 = x.clone(), w.clone()
    y = mod.kernel(x, w, 1e-5)
    assert y.shape == x.shape and y.dtype == dtype
    torch.testing.assert_close(y, reference.rmsnorm(x, w, 1e-5), **reference.TOL[dtype])
    assert torch.equal(x, x0) and torch.equal(w, w0), "inputs were modified"


@pytest.mark.parametrize(
    "params", [{}, {"BLOCK_E": "1024", "ROWS_PER_PROGRAM": "2"}], ids=["whole", "chunk1024"]
)
def test_wide_row_with_ragged_tail(load: Loader, params: dict[str, str]) -> None:
    # 4096 + 33: the whole-row block is 8192 wide (half masked); chunks of 1024 leave a 33-wide tail
    mod = load(render("rmsnorm", params))
    torch.manual_seed(1)
    x = torch.randn(2, 4096 + 33)
    w = torch.randn(4096 + 33)
    torch.testing.assert_close(mod.kernel(x, w, 1e-6), reference.rmsnorm(x, w, 1e-6))


@pytest.mark.parametrize("layout", ["strided-rows", "strided-cols", "transposed"])
def test_non_contiguous_inputs(load: Loader, layout: str) -> None:
    mod = load(render("rmsnorm", VARIANTS["rows4-w8"]))
    torch.manual_seed(2)
    base = torch.randn(4, 6, 2 * 200, dtype=torch.bfloat16)
    x = {
        "strided-rows": base[..., :200],  # rows 400 apart: reshape keeps a view
        "strided-cols": base[..., ::2],  # last-dim stride 2: copied to contiguous first
        "transposed": base[..., :200].transpose(0, 1),  # reshape must copy
    }[layout]
    w = torch.randn(200, dtype=torch.bfloat16)
    base0 = base.clone()
    y = mod.kernel(x, w, 1e-6)
    assert y.shape == x.shape
    torch.testing.assert_close(y, reference.rmsnorm(x, w, 1e-6), **reference.TOL[torch.bfloat16])
    assert torch.equal(base, base0)


def test_eps_is_used_and_empty_input(load: Loader) -> None:
    mod = load(render("rmsnorm", {}))
    x = torch.full((2, 96), 0.01)
    w = torch.ones(96)
    # with eps = 1 the tiny activations stay tiny; with eps ~ 0 they normalise to 1
    torch.testing.assert_close(mod.kernel(x, w, 1.0), reference.rmsnorm(x, w, 1.0))
    assert mod.kernel(x, w, 1e-12)[0, 0].item() == pytest.approx(1.0, rel=1e-4)
    assert mod.kernel(torch.empty(0, 5, 96), w, 1e-6).shape == (0, 5, 96)
    with pytest.raises(ValueError, match="weight"):
        mod.kernel(x, torch.ones(95), 1e-6)
