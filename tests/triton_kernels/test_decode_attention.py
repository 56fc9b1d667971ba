"""The split-KV decode-attention candidate under the Triton interpreter, against torch's SDPA.

Cache views (strided k/v slices), a transposed q, GQA groups of 1, 3 and 8, odd head dims, masks with
dead blocks, a row with no live position, splits from one to many, and the prefill fallback.
"""

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
    "bn16-splits3": {"BLOCK_N": "16", "SPLITS": "3"},
    "one-split-no-skip": {"BLOCK_N": "32", "SPLITS": "1", "SKIP_DEAD": "0"},
}
# (B, Hq, Hkv, T, D): GQA 2, 3 (odd head dim 24: a masked head dim), 8, and plain MHA
SHAPES = [(1, 4, 2, 37, 16), (3, 6, 2, 100, 24), (2, 8, 1, 130, 64), (2, 2, 2, 50, 32)]


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every buffer the candidate allocates with torch.empty starts as NaN: an unwritten output fails."""
    empty = torch.empty

    def poisoned_empty(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

    monkeypatch.setattr(torch, "empty", poisoned_empty)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.size(1) != k.size(1))


def decode_inputs(B: int, Hq: int, Hkv: int, T: int, D: int, dtype: torch.dtype, seed: int,
                  per_row_mask: bool = True) -> tuple[torch.Tensor, ...]:
    """q as a transposed [B,1,Hq,D] view, k/v as [:B, :, :T] views of a larger cache, a mask with a
    dead leading block in row 0 and random holes elsewhere (the current position always live)."""
    g = torch.Generator().manual_seed(seed)
    cache_k = torch.randn(B + 1, Hkv, T + 11, D, generator=g).to(dtype)
    cache_v = torch.randn(B + 1, Hkv, T + 11, D, generator=g).to(dtype)
    q = torch.randn(B, 1, Hq, D, generator=g).to(dtype).transpose(1, 2)
    live = torch.rand(B if per_row_mask else 1, 1, 1, T, generator=g) < 0.6
    live[0, ..., : min(T - 1, 40)] = False
    live[..., T - 1] = True
    return q, cache_k[:B, :, :T], cache_v[:B, :, :T], live


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_sdpa(load: Loader, variant: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    mod = load(render("attention", VARIANTS[variant]))
    q, k, v, mask = decode_inputs(*shape, dtype, seed=sum(shape), per_row_mask=shape[0] != 2)
    before = [t.clone() for t in (q, k, v, mask)]
    y = mod.kernel(q, k, v, mask)
    assert y.shape == q.shape and y.dtype == dtype and torch.isfinite(y).all()
    torch.testing.assert_close(y, sdpa(q, k, v, mask), **reference.TOL[dtype])
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, mask), before, strict=True)), "inputs were modified"


def test_a_row_with_no_live_position_gives_zero_like_sdpa(load: Loader) -> None:
    mod = load(render("attention", VARIANTS["bn16-splits3"]))
    q, k, v, mask = decode_inputs(2, 4, 2, 60, 16, torch.float32, seed=5)
    mask[1] = False
    y, want = mod.kernel(q, k, v, mask), sdpa(q, k, v, mask)
    assert torch.equal(y[1], torch.zeros_like(y[1])) and torch.equal(want[1], torch.zeros_like(want[1]))
    torch.testing.assert_close(y, want)


def test_full_static_cache_with_the_live_prefix_only(load: Loader) -> None:
    # the CUDA-graph shape: k/v of the whole static cache, a causal mask row marking the live prefix
    mod = load(render("attention", {"BLOCK_N": "16"}))
    q, k, v, _ = decode_inputs(2, 8, 2, 96, 32, torch.float32, seed=9)
    causal = torch.tril(torch.ones(96, 96, dtype=torch.bool))
    mask = causal[None, None, torch.tensor([40]), :]  # position 40 of a 96-long cache
    torch.testing.assert_close(mod.kernel(q, k, v, mask), sdpa(q, k, v, mask))
    k2 = k.clone()
    k2[:, :, 41:] = float("nan")  # positions past the live prefix are never read
    torch.testing.assert_close(mod.kernel(q, k2, v, mask), sdpa(q, k, v, mask))


def test_nan_in_a_live_position_propagates(load: Loader) -> None:
    mod = load(render("attention", {}))
    q, k, v, mask = decode_inputs(1, 4, 2, 30, 16, torch.float32, seed=2)
    k[0, 1, 29, 3] = float("nan")  # kv head 1, the always-live last position
    y = mod.kernel(q, k, v, mask)
    assert torch.isnan(y[0, 2:]).all() and torch.isfinite(y[0, :2]).all()


def test_prefill_float_masks_and_strided_head_dims_take_sdpa(load: Loader) -> None:
    mod = load(render("attention", {}))
    torch.manual_seed(4)
    q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    causal = torch.tril(torch.ones(9, 9, dtype=torch.bool))[None, None, 4:]
    assert torch.equal(mod.kernel(q, k, v, causal), sdpa(q, k, v, causal))
    q1 = q[:, :, :1]
    fmask = torch.zeros(1, 1, 1, 9)
    assert torch.equal(mod.kernel(q1, k, v, fmask), sdpa(q1, k, v, fmask))
    ks = torch.randn(2, 2, 16, 9).transpose(2, 3)  # head dim not contiguous
    bmask = torch.ones(1, 1, 1, 9, dtype=torch.bool)
    assert torch.equal(mod.kernel(q1, ks, v, bmask), sdpa(q1, ks, v, bmask))


def test_every_grid_variant_computes(load: Loader) -> None:
    q, k, v, mask = decode_inputs(2, 4, 2, 70, 16, torch.float32, seed=11)
    want = sdpa(q, k, v, mask)
    for _, source, params in candidates(("attention",)):
        try:
            torch.testing.assert_close(load(source).kernel(q, k, v, mask), want)
        except AssertionError as e:
            raise AssertionError(f"{params}: {e}") from e


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 32, 8, 1152, 64), (64, 32, 8, 1152, 64), (4, 32, 8, 1152, 128)], ids=str)
def test_llama_decode_on_gpu_and_in_a_cuda_graph(load: Loader, shape: tuple[int, ...]) -> None:
    B, Hq, Hkv, T, D = shape
    mod = load(render("attention", {}), interpret=False)
    cache = torch.randn(2, B, Hkv, T, D, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device="cuda"))
    pos = torch.tensor([1019], device="cuda")
    mask = causal[None, None, pos, :]
    torch.testing.assert_close(mod.kernel(q, cache[0], cache[1], mask), sdpa(q, cache[0], cache[1], mask),
                               **reference.TOL[torch.bfloat16])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mod.kernel(q, cache[0], cache[1], mask)
    pos.fill_(500)  # the graph reads the new live length through the mask: no re-capture
    mask.copy_(causal[None, None, pos, :])
    graph.replay()
    torch.testing.assert_close(out, sdpa(q, cache[0], cache[1], mask), **reference.TOL[torch.bfloat16])
