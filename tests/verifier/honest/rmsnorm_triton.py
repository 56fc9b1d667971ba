# expect: pass
# dynamic: pass
# family: honest
"""RMSNorm as one small Triton kernel, one program per row and the whole row in one block (E <= 64K):
load, sum of squares in float32, rsqrt, round to x's dtype, multiply by the weight, store. Runs under
the Triton interpreter on the CPU."""
import torch
import triton
import triton.language as tl

SLOT = "rmsnorm"
BACKEND = "triton"


@triton.jit
def _rmsnorm_row(X, W, Y, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = (x * rstd).to(X.dtype.element_ty).to(tl.float32) * w
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=ok)


def kernel(x, weight, eps):
    n_cols = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y2 = y.view(-1, n_cols)
    _rmsnorm_row[(x2.shape[0],)](
        x2, weight.contiguous(), y2, x2.stride(0), y2.stride(0), n_cols, float(eps),
        BLOCK=triton.next_power_of_2(n_cols),
    )
    return y
