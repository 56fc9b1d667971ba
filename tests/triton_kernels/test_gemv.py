"""The `linear` GEMV candidate under the Triton interpreter: few rows, odd N and K, split-K, fallbacks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from services.agent_pool.library.triton import candidates, render
from tests.triton_kernels import reference
from tests.triton_kernels.conftest import Loader
from tests.triton_kernels.reference import DTYPES

VARIANTS = {
    "default": {},
    # K in chunks of 64 split over 3 programs: a ragged last chunk, the last-arriving program reduces
    "split3-k64": {"SPLIT_K": "3", "BLOCK_K": "64", "BLOCK_N": "32"},
    "n8-k128-w2": {"BLOCK_N": "8", "BLOCK_K": "128", "NUM_WARPS": "2", "NUM_STAGES": "1"},
}
# (leading dims of x, N, K): one row (the FMA path), 3 and 16 rows (the dot path), odd N and K
SHAPES = [((1, 1), 37, 200), ((3,), 70, 130), ((2, 8), 33, 64), ((1,), 5, 7)]


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every buffer the candidate allocates with torch.empty starts as NaN: an unwritten output fails."""
    empty = torch.empty

    def poisoned_empty(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

    monkeypatch.setattr(torch, "empty", poisoned_empty)


def _check(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    want = F.linear(x, w)
    assert y.shape == want.shape and y.dtype == x.dtype
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, want, **reference.TOL[x.dtype])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_f_linear(load: Loader, variant: str, dtype: torch.dtype, shape: tuple) -> None:
    mod = load(render("linear", VARIANTS[variant]))
    lead, n, k = shape
    torch.manual_seed(n * k)
    x, w = torch.randn(*lead, k, dtype=dtype), torch.randn(n, k, dtype=dtype) / k**0.5
    x0, w0 = x.clone(), w.clone()
    _check(mod.kernel(x, w), x, w)
    assert torch.equal(x, x0) and torch.equal(w, w0), "inputs were modified"


def test_strided_inputs_and_a_weight_slice(load: Loader) -> None:
    mod = load(render("linear", VARIANTS["split3-k64"]))
    torch.manual_seed(1)
    big = torch.randn(48, 300)
    w = big[:45, 20:220]  # rows 300 apart: a view into a wider weight, no copy
    x = torch.randn(200, 4).t()  # [4, 200] with a strided K dimension
    _check(mod.kernel(x, w), x, w)
    wt = torch.randn(200, 45).t()  # a transposed weight (K not contiguous): F.linear's path
    torch.testing.assert_close(mod.kernel(x, wt), F.linear(x, wt))


def test_nan_and_inf_propagate_like_f_linear(load: Loader) -> None:
    mod = load(render("linear", {}))
    for rows in (1, 3):
        x, w = torch.randn(rows, 96), torch.randn(20, 96)
        x[0, 5] = float("nan")
        w[3, 7] = float("inf")
        y, want = mod.kernel(x, w), F.linear(x, w)
        assert torch.equal(torch.isnan(y), torch.isnan(want)) and torch.isnan(y[0]).all()
        torch.testing.assert_close(y[1:], want[1:], equal_nan=True)


def test_more_rows_than_max_m_or_other_dtypes_take_f_linear(load: Loader) -> None:
    mod = load(render("linear", {"MAX_M": "4"}))
    x, w = torch.randn(5, 33), torch.randn(9, 33)
    assert torch.equal(mod.kernel(x, w), F.linear(x, w))
    xd, wd = x.double(), w.double()
    assert torch.equal(mod.kernel(xd, wd), F.linear(xd, wd))
    assert torch.equal(mod.kernel(x[:0], w), F.linear(x[:0], w))  # no rows
    with pytest.raises(RuntimeError):
        mod.kernel(x[:2, :32], w)  # K mismatch: F.linear's error


def test_repeated_split_k_calls_are_independent(load: Loader) -> None:
    # the per-tile arrival counters must not carry state from one call into the next
    mod = load(render("linear", {"SPLIT_K": "4", "BLOCK_K": "32"}))
    w = torch.randn(24, 200)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(2, 200)
        _check(mod.kernel(x, w), x, w)


def test_every_grid_variant_computes(load: Loader) -> None:
    torch.manual_seed(3)
    w = torch.randn(40, 300) / 300**0.5
    for _, source, params in candidates(("linear",)):
        mod = load(source)
        for rows in (1, 3):
            x = torch.randn(rows, 300)
            try:
                _check(mod.kernel(x, w), x, w)
            except AssertionError as e:
                raise AssertionError(f"{params} rows={rows}: {e}") from e


@pytest.mark.gpu
@pytest.mark.parametrize("nk", [(3072, 2048), (2048, 8192), (14336 + 5, 4096)], ids=str)
def test_llama_shapes_on_gpu(load: Loader, nk: tuple[int, int]) -> None:
    n, k = nk
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    for params in ({}, {"SPLIT_K": "4", "BLOCK_N": "32"}, {"BLOCK_N": "64", "BLOCK_K": "256"}):
        mod = load(render("linear", params), interpret=False)
        for rows in (1, 4, 16):
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            want = (x.double() @ w.double().t())
            err = float((mod.kernel(x, w).double() - want).norm() / want.norm())
            assert err < 1e-2, (params, rows, err)
