"""Rotary embedding as one Triton kernel: interleaved pairs rotated in float32, stored in x's dtype.

The reference is several torch kernels per call (a float copy, the products, a stack, a cast): at
decode that is launches, not bytes, and a Llama step calls it twice per layer. q and k arrive as views
of the fused QKV projection's output (rows strided by the whole projection), so the kernel takes the
batch, sequence and head strides instead of forcing copies. A complete candidate module (SLOT,
BACKEND, kernel) that imports nothing from the repository; `services.agent_pool.library.triton.render`
rewrites the launch constants below to make variants.
"""

import torch
import triton
import triton.language as tl

SLOT = "rope"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
NUM_WARPS = 1  # warps per program
BLOCK_H = 8  # heads per program (a power of two): one token's heads in few programs at decode
# --- end of launch parameters ---


def _check_params() -> None:
    # a malformed variant fails when it is loaded, with a message that names the parameter
    def pow2(v: int) -> bool:
        return v > 0 and v & (v - 1) == 0

    if not (isinstance(NUM_WARPS, int) and pow2(NUM_WARPS) and NUM_WARPS <= 32):
        raise ValueError(f"NUM_WARPS must be a power of two <= 32, got {NUM_WARPS!r}")
    if not (isinstance(BLOCK_H, int) and pow2(BLOCK_H) and BLOCK_H <= 256):
        raise ValueError(f"BLOCK_H must be a power of two <= 256, got {BLOCK_H!r}")


_check_params()


# B, S, H are not specialised (a compile per batch size otherwise): one compile serves decode and prefill
@triton.jit(do_not_specialize=["S", "H"])
def _rope_fwd(
    X, F, Y, stride_xb, stride_xs, stride_xh, stride_fs, S, H, HALF,
    BLOCK_H: tl.constexpr, BLOCK_P: tl.constexpr,
):
    row = tl.program_id(0)  # one token: b * S + s
    b, s = row // S, row % S
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    pairs = tl.arange(0, BLOCK_P)
    m = (heads < H)[:, None] & (pairs < HALF)[None, :]
    f = F + s.to(tl.int64) * stride_fs + 2 * pairs  # freqs_cis [S, D/2, 2]: (cos, sin) per pair
    cos = tl.load(f, mask=pairs < HALF, other=0.0)[None, :]
    sin = tl.load(f + 1, mask=pairs < HALF, other=0.0)[None, :]
    x = X + b.to(tl.int64) * stride_xb + s.to(tl.int64) * stride_xs + heads.to(tl.int64)[:, None] * stride_xh
    x0 = tl.load(x + 2 * pairs[None, :], mask=m, other=0.0).to(tl.float32)
    x1 = tl.load(x + 2 * pairs[None, :] + 1, mask=m, other=0.0).to(tl.float32)
    y = Y + (row.to(tl.int64) * H + heads.to(tl.int64))[:, None] * (2 * HALF)
    tl.store(y + 2 * pairs[None, :], (x0 * cos - x1 * sin).to(Y.dtype.element_ty), mask=m)
    tl.store(y + 2 * pairs[None, :] + 1, (x1 * cos + x0 * sin).to(Y.dtype.element_ty), mask=m)


def kernel(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """x [B, S, H, D], freqs_cis [S, D/2, 2] float32 (cos, sin) -> [B, S, H, D] in x's dtype (gpt-fast's
    interleaved pairs); x is not modified."""
    if x.dim() != 4 or x.shape[-1] % 2:
        raise ValueError(f"x must be [B, S, H, D] with an even D, got {tuple(x.shape)}")
    B, S, H, D = x.shape
    if tuple(freqs_cis.shape) != (S, D // 2, 2):
        raise ValueError(f"freqs_cis shape {tuple(freqs_cis.shape)} != {(S, D // 2, 2)}")
    y = torch.empty((B, S, H, D), dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    if x.stride(-1) != 1:
        x = x.contiguous()
    f = freqs_cis.float()
    if f.stride(-1) != 1 or f.stride(-2) != 2:
        f = f.contiguous()
    grid = (B * S, triton.cdiv(H, BLOCK_H))
    _rope_fwd[grid](
        x, f, y, x.stride(0), x.stride(1), x.stride(2), f.stride(0), S, H, D // 2,
        BLOCK_H=BLOCK_H, BLOCK_P=triton.next_power_of_2(D // 2), num_warps=NUM_WARPS,
    )
    return y
