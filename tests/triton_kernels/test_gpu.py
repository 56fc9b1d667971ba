"""The same candidates compiled for a real GPU (skipped without one): Llama shapes, bf16, CUDA graphs."""

from __future__ import annotations

import pytest
import torch

from services.agent_pool.library.triton import candidates, render
from tests.triton_kernels import reference
from tests.triton_kernels.conftest import Loader

pytestmark = pytest.mark.gpu

ROWS = (1, 64, 4096 + 3)  # decode, a decode batch, a prefill with a ragged last row block


def _variants(slot: str, n: int = 4) -> list[dict[str, str]]:
    grid = [params for s, _, params in candidates((slot,))]
    step = max(1, len(grid) // n)
    return grid[::step]  # spread over the grid: whole-row and chunked tiles, few and many warps


def _inputs(rows: int, width: int, n: int) -> list[torch.Tensor]:
    torch.manual_seed(rows + width)
    return [torch.randn(rows, width, device="cuda", dtype=torch.bfloat16) for _ in range(n)]


@pytest.mark.parametrize("width", [2048, 4096 + 33])
@pytest.mark.parametrize("slot", ["rmsnorm", "add_rmsnorm"])
def test_norms_on_gpu(load: Loader, slot: str, width: int) -> None:
    for params in _variants(slot):
        mod = load(render(slot, params), interpret=False)
        for rows in ROWS:
            x, r = _inputs(rows, width, 2)
            w = torch.randn(width, device="cuda", dtype=torch.bfloat16)
            if slot == "rmsnorm":
                got, want = (mod.kernel(x, w, 1e-5),), (reference.rmsnorm(x, w, 1e-5),)
            else:
                got, want = mod.kernel(x, r, w, 1e-5), reference.add_rmsnorm(x, r, w, 1e-5)
            for g, e in zip(got, want, strict=True):
                try:
                    torch.testing.assert_close(g, e, **reference.TOL[torch.bfloat16])
                except AssertionError as err:
                    raise AssertionError(f"{slot} {params} rows={rows}: {err}") from err


@pytest.mark.parametrize("width", [8192, 14336 + 5])
def test_silu_mul_on_gpu(load: Loader, width: int) -> None:
    for params in _variants("silu_mul"):
        mod = load(render("silu_mul", params), interpret=False)
        for rows in ROWS:
            gate, up = _inputs(rows, width, 2)
            torch.testing.assert_close(
                mod.kernel(gate, up), reference.silu_mul(gate, up), **reference.TOL[torch.bfloat16]
            )


def test_candidates_replay_inside_a_cuda_graph(load: Loader) -> None:
    # the engine captures decode steps in CUDA graphs: a candidate must capture and replay correctly
    mods = {slot: load(render(slot, {}), interpret=False) for slot in ("rmsnorm", "add_rmsnorm", "silu_mul")}
    x, r = _inputs(64, 4096, 2)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    run = lambda: (  # noqa: E731
        mods["rmsnorm"].kernel(x, w, 1e-5),
        *mods["add_rmsnorm"].kernel(x, r, w, 1e-5),
        mods["silu_mul"].kernel(x, r),
    )
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run()
    x.copy_(torch.randn_like(x))  # new inputs in the captured buffers
    graph.replay()
    torch.cuda.synchronize()
    want = (reference.rmsnorm(x, w, 1e-5), *reference.add_rmsnorm(x, r, w, 1e-5), reference.silu_mul(x, r))
    for g, e in zip(outs, want, strict=True):
        torch.testing.assert_close(g, e, **reference.TOL[torch.bfloat16])


@pytest.mark.parametrize("batch,seq", [(1, 1), (64, 1), (1, 1020)])
def test_rope_on_gpu_on_views_of_the_fused_projection(load: Loader, batch: int, seq: int) -> None:
    Hq, Hkv, D = 32, 8, 64  # Llama-3.2-1B
    torch.manual_seed(batch + seq)
    qkv = torch.randn(batch, seq, (Hq + 2 * Hkv) * D, device="cuda", dtype=torch.bfloat16)
    q = qkv[..., : Hq * D].view(batch, seq, Hq, D)
    f = reference.freqs(torch.arange(seq) + 1019 - seq + 1, D // 2).cuda()
    for params in _variants("rope"):
        mod = load(render("rope", params), interpret=False)
        torch.testing.assert_close(mod.kernel(q, f), reference.rope(q, f), **reference.TOL[torch.bfloat16])
