"""RMSNorm as one Triton kernel: y = (x * rsqrt(mean(x^2) + eps)).to(x.dtype) * weight.

A complete candidate module (SLOT, BACKEND, kernel); it imports nothing from the repository because
the engine loads it from its own file. The launch constants below are rewritten by
`services.agent_pool.library.triton.render` to make variants; each rendered text is its own candidate.
"""

import torch
import triton
import triton.language as tl

SLOT = "rmsnorm"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
NUM_WARPS = 4  # warps per program
ROWS_PER_PROGRAM = 1  # rows each program normalises as one [ROWS, BLOCK] tile (a power of two)
BLOCK_E = 0  # 0: the whole row in one block of next_power_of_2(E); else a loop over chunks of BLOCK_E
NUM_STAGES = 2  # software-pipelining depth of the chunk loop (BLOCK_E > 0 only)
# --- end of launch parameters ---

MAX_FUSED = 65536  # a whole-row block larger than this spills registers: such rows use chunks instead


def _check_params() -> None:
    # a malformed variant fails when it is loaded, with a message that names the parameter
    def pow2(v: int) -> bool:
        return v > 0 and v & (v - 1) == 0

    if not (isinstance(NUM_WARPS, int) and pow2(NUM_WARPS) and NUM_WARPS <= 32):
        raise ValueError(f"NUM_WARPS must be a power of two <= 32, got {NUM_WARPS!r}")
    if not (isinstance(ROWS_PER_PROGRAM, int) and pow2(ROWS_PER_PROGRAM)):
        raise ValueError(f"ROWS_PER_PROGRAM must be a power of two, got {ROWS_PER_PROGRAM!r}")
    if not (isinstance(BLOCK_E, int) and (BLOCK_E == 0 or pow2(BLOCK_E))):
        raise ValueError(f"BLOCK_E must be 0 or a power of two, got {BLOCK_E!r}")
    if not (isinstance(NUM_STAGES, int) and 1 <= NUM_STAGES <= 8):
        raise ValueError(f"NUM_STAGES must be in 1..8, got {NUM_STAGES!r}")


_check_params()


# n_rows is not specialised (Triton would compile again for 1 and for multiples of 16): one compile
# serves decode at every batch and prefill
@triton.jit(do_not_specialize=["n_rows"])
def _rmsnorm_fwd(
    X, W, Y, stride_x, stride_y, n_rows, n_cols, eps,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr, STAGES: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    # int64 row offsets: rows * stride overflows int32 at long prefills of wide models
    x_rows = X + rows.to(tl.int64)[:, None] * stride_x
    y_rows = Y + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK)
    if CHUNKS > 0:
        # the chunk count is a compile-time constant (one compile per model width), which also keeps
        # the loop runnable under TRITON_INTERPRET with numpy >= 2.4 (no int() of a runtime scalar)
        # pass 1: sum of squares over chunks; pass 2 reloads x (mostly from L2) to normalise
        acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        for i in tl.range(0, CHUNKS, num_stages=STAGES):
            c = i * BLOCK + cols
            m = row_ok[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=m, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for i in tl.range(0, CHUNKS, num_stages=STAGES):
            c = i * BLOCK + cols
            m = row_ok[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=m, other=0.0).to(tl.float32)
            w = tl.load(W + c, mask=c < n_cols, other=0.0).to(tl.float32)
            # round to x's dtype before the weight multiply, as the reference does
            y = (x * rstd[:, None]).to(X.dtype.element_ty).to(tl.float32) * w[None, :]
            tl.store(y_rows + c[None, :], y.to(Y.dtype.element_ty), mask=m)
    else:
        col_ok = cols < n_cols
        m = row_ok[:, None] & col_ok[None, :]
        x = tl.load(x_rows + cols[None, :], mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        y = (x * rstd[:, None]).to(X.dtype.element_ty).to(tl.float32) * w[None, :]
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=m)


def kernel(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., E], weight [E] -> rmsnorm(x) * weight in x.dtype; x is not modified."""
    n_cols = x.shape[-1]
    if weight.shape != (n_cols,):
        raise ValueError(f"weight must have shape ({n_cols},), got {tuple(weight.shape)}")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    x2 = x.reshape(-1, n_cols)  # a view when it can be, a copy otherwise: never writes into x
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y2 = y.view(-1, n_cols)
    n_rows = x2.shape[0]
    chunked = BLOCK_E > 0 or triton.next_power_of_2(n_cols) > MAX_FUSED
    block = triton.next_power_of_2(n_cols)
    if chunked:
        block = min(BLOCK_E or 4096, block)
    chunks = triton.cdiv(n_cols, block) if chunked else 0
    grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM),)
    _rmsnorm_fwd[grid](
        x2, weight.contiguous(), y2, x2.stride(0), y2.stride(0), n_rows, n_cols, float(eps),
        ROWS=ROWS_PER_PROGRAM, BLOCK=block, CHUNKS=chunks, STAGES=NUM_STAGES, num_warps=NUM_WARPS,
    )
    return y
