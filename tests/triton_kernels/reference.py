"""Plain torch references, written the way the models call them (gpt-fast), and per-dtype tolerances."""

from __future__ import annotations

import torch

# odd row counts and widths (200 and 257 leave ragged tails), the three dtypes the models run in
SHAPES = [(3, 7, 200), (1, 1, 96), (2, 5, 257)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# launch variants of the two norm kernels; chunks of 64 run the row loop with a ragged tail (and in
# add_rmsnorm, h is written in pass 1 and read back in pass 2)
NORM_VARIANTS = {
    "default": {},
    "rows4-w8": {"ROWS_PER_PROGRAM": "4", "NUM_WARPS": "8"},
    "chunk64-rows2": {"BLOCK_E": "64", "ROWS_PER_PROGRAM": "2", "NUM_STAGES": "3"},
}

TOL: dict[torch.dtype, dict[str, float]] = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    # the interpreter rounds float32 -> bfloat16 toward zero where the GPU rounds to nearest: one ulp
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
}


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + residual
    return rmsnorm(h, weight, eps), h


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


def rope(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    # gpt-fast: interleaved pairs (x[..., 2i], x[..., 2i+1]) rotated by (cos, sin) in float32
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack([xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1],
                       xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]], dim=-1)
    return out.flatten(3).type_as(x)


def freqs(positions: torch.Tensor, half: int, base: float = 500000.0) -> torch.Tensor:
    """[len(positions), half, 2] float32 (cos, sin), as the models build them."""
    inv = 1.0 / base ** (torch.arange(half, dtype=torch.float32) / half)
    angles = positions.float()[:, None] * inv[None, :]
    return torch.stack([angles.cos(), angles.sin()], dim=-1)
