"""The argmax `sample` candidate under the Triton interpreter: exactly torch.argmax, ties, NaN and -0.0 included."""

from __future__ import annotations

import pytest
import torch

from services.agent_pool.library.triton import candidates, render
from tests.triton_kernels.conftest import Loader

NAN, INF = float("nan"), float("inf")
VARIANTS = {
    "default": {},
    "v16-tiles3": {"BLOCK_V": "16", "TILES": "3", "NUM_WARPS": "1"},  # many chunks, ragged last tile
    "v4096": {"BLOCK_V": "4096", "TILES": "1", "NUM_WARPS": "8"},  # one chunk: stage 1 writes the ids
}


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every buffer the candidate allocates with torch.empty starts poisoned: an unwritten id fails."""
    empty = torch.empty

    def poisoned_empty(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

    monkeypatch.setattr(torch, "empty", poisoned_empty)


def _cases() -> list[torch.Tensor]:
    torch.manual_seed(0)
    ties = torch.randint(0, 3, (4, 777)).float()  # every row has its maximum many times
    hot = torch.randn(5, 2000)
    hot[1, 1500] = hot[1, 1999] = INF
    hot[2, 100], hot[2, 1900] = NAN, INF  # NaN wins over a later +inf
    hot[3] = 7.0  # one value everywhere: index 0
    hot[4, 1234] = -NAN  # a negative-signed NaN is a NaN too
    return [
        torch.randn(3, 1000), torch.randn(1, 5), ties, hot, torch.full((2, 300), -INF),
        torch.tensor([[1.0, NAN, 3.0, NAN], [-0.0, 0.0, -1.0, -2.0], [0.0, -0.0, -3.0, -3.0], [-5.0, -0.0, -0.0, -1]]),
        torch.randn(2, 513).bfloat16(), torch.randint(-2, 2, (3, 4099)).half(), torch.randn(2, 1),
    ]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_equals_torch_argmax(load: Loader, variant: str) -> None:
    mod = load(render("sample", VARIANTS[variant]))
    for logits in _cases():
        before = logits.clone()
        got, want = mod.kernel(logits), torch.argmax(logits, dim=-1)
        assert got.dtype == torch.int64 and got.shape == want.shape
        assert torch.equal(got, want), (logits, got, want)
        torch.testing.assert_close(logits, before, rtol=0, atol=0, equal_nan=True)  # not modified


def test_strided_rows_and_other_ranks_or_dtypes(load: Loader) -> None:
    mod = load(render("sample", VARIANTS["v16-tiles3"]))
    torch.manual_seed(1)
    wide = torch.randint(0, 5, (3, 500)).float()
    for logits in (wide[:, 100:400], wide.t().contiguous().t()[:, :333], wide[::2]):
        assert torch.equal(mod.kernel(logits), torch.argmax(logits, dim=-1))
    for other in (torch.randn(7), torch.randn(2, 3, 40), torch.randn(3, 50, dtype=torch.float64)):
        assert torch.equal(mod.kernel(other), torch.argmax(other, dim=-1))
    with pytest.raises((RuntimeError, IndexError)):
        mod.kernel(torch.empty(2, 0))  # torch.argmax's own error on an empty row


def test_every_grid_variant_computes(load: Loader) -> None:
    torch.manual_seed(2)
    logits = torch.randint(0, 50, (2, 9000)).float()  # ties across chunks of every variant's size
    logits[1, 8500] = NAN
    want = torch.argmax(logits, dim=-1)
    for _, source, params in candidates(("sample",)):
        assert torch.equal(load(source).kernel(logits), want), params


@pytest.mark.gpu
def test_llama_vocab_on_gpu(load: Loader) -> None:
    for params in ({}, {"BLOCK_V": "4096", "TILES": "2"}):
        mod = load(render("sample", params), interpret=False)
        for rows in (1, 64):
            logits = torch.randint(0, 1000, (rows, 128256), device="cuda").float()  # many exact ties
            assert torch.equal(mod.kernel(logits), torch.argmax(logits, dim=-1)), params
