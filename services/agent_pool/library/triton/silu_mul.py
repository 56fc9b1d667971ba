"""SwiGLU's gate as one Triton kernel: silu(gate) * up, computed in float32, stored in gate's dtype.

Rows may be strided (gate and up are often two halves of one fused projection's output), so the kernel
takes a row stride per tensor instead of forcing copies. A complete candidate module (SLOT, BACKEND,
kernel) that imports nothing from the repository; `services.agent_pool.library.triton.render`
rewrites the launch constants below to make variants.
"""

import torch
import triton
import triton.language as tl

SLOT = "silu_mul"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
NUM_WARPS = 4  # warps per program
ROWS_PER_PROGRAM = 1  # rows per program (a power of two): fewer, larger programs for many short rows
BLOCK_I = 1024  # columns per program (a power of two): more, smaller programs keep decode's few rows busy
# --- end of launch parameters ---


def _check_params() -> None:
    # a malformed variant fails when it is loaded, with a message that names the parameter
    def pow2(v: int) -> bool:
        return v > 0 and v & (v - 1) == 0

    if not (isinstance(NUM_WARPS, int) and pow2(NUM_WARPS) and NUM_WARPS <= 32):
        raise ValueError(f"NUM_WARPS must be a power of two <= 32, got {NUM_WARPS!r}")
    if not (isinstance(ROWS_PER_PROGRAM, int) and pow2(ROWS_PER_PROGRAM)):
        raise ValueError(f"ROWS_PER_PROGRAM must be a power of two, got {ROWS_PER_PROGRAM!r}")
    if not (isinstance(BLOCK_I, int) and pow2(BLOCK_I) and ROWS_PER_PROGRAM * BLOCK_I <= 65536):
        raise ValueError(f"BLOCK_I must be a power of two with ROWS_PER_PROGRAM * BLOCK_I <= 65536, "
                         f"got {BLOCK_I!r}")


_check_params()


# n_rows is not specialised (Triton would compile again for 1 and for multiples of 16): one compile
# serves decode at every batch and prefill
@triton.jit(do_not_specialize=["n_rows"])
def _silu_mul_fwd(
    G, U, Y, stride_g, stride_u, stride_y, n_rows, n_cols,
    ROWS: tl.constexpr, BLOCK: tl.constexpr,
):
    # axis 0 walks rows (up to 2^31 programs), axis 1 column blocks (few): no 65535 grid-limit issue
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride overflows int32 at long prefills
    g = tl.load(G + rows64 * stride_g + cols[None, :], mask=m, other=0.0).to(tl.float32)
    u = tl.load(U + rows64 * stride_u + cols[None, :], mask=m, other=0.0).to(tl.float32)
    y = g * tl.sigmoid(g) * u
    tl.store(Y + rows64 * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=m)


def _rows(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    t2 = t.reshape(-1, n_cols)  # a view when it can be (strided rows included), a copy otherwise
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def kernel(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up [..., I] -> silu(gate) * up [..., I] in gate's dtype; inputs are not modified."""
    if gate.shape != up.shape:
        raise ValueError(f"gate shape {tuple(gate.shape)} != up shape {tuple(up.shape)}")
    n_cols = gate.shape[-1]
    y = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    if gate.numel() == 0:
        return y
    g2, u2 = _rows(gate, n_cols), _rows(up, n_cols)
    y2 = y.view(-1, n_cols)
    n_rows = g2.shape[0]
    grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM), triton.cdiv(n_cols, BLOCK_I))
    _silu_mul_fwd[grid](
        g2, u2, y2, g2.stride(0), u2.stride(0), y2.stride(0), n_rows, n_cols,
        ROWS=ROWS_PER_PROGRAM, BLOCK=BLOCK_I, num_warps=NUM_WARPS,
    )
    return y
