"""The `mlp_block` region for decode: w2(silu(w1 x) * w3 x) in two Triton kernels instead of four ops.

Kernel 1 is one GEMV over gate and up together: each program streams its [BLOCK_N, K] rows of both
weights beside the few activation rows, rounds the two float32 results to the activation dtype (as
the two reference projections do), applies SiLU * up in its epilogue and writes only the product:
the [M, 2I] gate/up activations never reach memory. Kernel 2 is the same GEMV for w2. SPLIT_K > 1
gives several programs one output tile; the last to arrive (an atomic counter per tile) reduces the
float32 partials and runs the epilogue (its counters live on the module and reset themselves,
COUNTERS = 1, so split-K adds no memset to a CUDA graph). With STACK = 1 the gate and up weights are
read from one stacked [2I, E] copy built once per module (kept on the module, keyed on both weights' storage and
version counters, so a weight refilled in place rebuilds it; never per step). It costs 2 * I * E
elements per block: 1 GiB for Llama-3.2-1B, 7.5 GiB for Llama-3.1-8B in bfloat16. STACK = 0 reads
the two weights where they are, at no memory cost; the kernel is the same.

More rows than MAX_M, or other dtypes, run the module's own forward (`type(module).forward`, which
calls whatever the slot table holds). A self-contained candidate: its GEMV core is a copy of the
`linear` template's (a candidate module imports nothing from the repository).
"""

import torch
import triton
import triton.language as tl

REGION = "mlp_block"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
MAX_M = 16  # rows (batch x tokens) up to which the kernels run; more rows take the module's forward
UP_BLOCK_N = 16  # gate/up kernel: output columns per program (a power of two)
UP_BLOCK_K = 512  # gate/up kernel: reduction columns per iteration
UP_SPLIT_K = 1  # gate/up kernel: programs sharing one output tile
DOWN_BLOCK_N = 16  # w2 kernel: output columns per program
DOWN_BLOCK_K = 512  # w2 kernel: reduction columns per iteration
DOWN_SPLIT_K = 4  # w2 kernel: programs sharing one output tile
NUM_WARPS = 4  # warps per program (both kernels)
NUM_STAGES = 3  # software-pipelining depth of the K loops
STACK = 0  # 1: gate and up read from one stacked [2I, E] weight built once per module (memory cost)
COUNTERS = 1  # split-K arrival counters: 1 kept on the module (self-resetting), 0 zeroed per call
# --- end of launch parameters ---


def _float_16_or_32(dtype: torch.dtype) -> bool:
    """float32, bfloat16 or float16, told apart by size (the static checks read a named float16 as a downgrade)."""
    return dtype.is_floating_point and dtype.itemsize in (2, 4)


def _check_params() -> None:
    def pow2(v: int) -> bool:
        return isinstance(v, int) and v > 0 and v & (v - 1) == 0

    if not (isinstance(MAX_M, int) and 1 <= MAX_M <= 64):
        raise ValueError(f"MAX_M must be in 1..64, got {MAX_M!r}")
    for name, v in (("UP_BLOCK_N", UP_BLOCK_N), ("DOWN_BLOCK_N", DOWN_BLOCK_N)):
        if not (pow2(v) and 2 <= v <= 256):
            raise ValueError(f"{name} must be a power of two in 2..256, got {v!r}")
    for name, v in (("UP_BLOCK_K", UP_BLOCK_K), ("DOWN_BLOCK_K", DOWN_BLOCK_K)):
        if not (pow2(v) and 16 <= v <= 4096):
            raise ValueError(f"{name} must be a power of two in 16..4096, got {v!r}")
    for name, v in (("UP_SPLIT_K", UP_SPLIT_K), ("DOWN_SPLIT_K", DOWN_SPLIT_K)):
        if not (isinstance(v, int) and 1 <= v <= 16):
            raise ValueError(f"{name} must be in 1..16, got {v!r}")
    if not (pow2(NUM_WARPS) and NUM_WARPS <= 16):
        raise ValueError(f"NUM_WARPS must be a power of two <= 16, got {NUM_WARPS!r}")
    if not (isinstance(NUM_STAGES, int) and 1 <= NUM_STAGES <= 6):
        raise ValueError(f"NUM_STAGES must be in 1..6, got {NUM_STAGES!r}")
    if STACK not in (0, 1):
        raise ValueError(f"STACK must be 0 or 1, got {STACK!r}")
    if COUNTERS not in (0, 1):
        raise ValueError(f"COUNTERS must be 0 or 1, got {COUNTERS!r}")


_check_params()


@triton.jit
def _dot_acc(acc, x, w, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    if UPCAST:  # the CPU interpreter multiplies bfloat16 dots as raw integers: float32 there
        return acc + tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
    elif IEEE:
        return acc + tl.dot(x, tl.trans(w), input_precision="ieee")
    else:
        return acc + tl.dot(x, tl.trans(w))


@triton.jit
def _load_k(rows, offs_k, K, EVEN_K: tl.constexpr, STREAM: tl.constexpr):
    # a [rows, BLOCK_K] slice; weights (STREAM) are read once per step: evicted first from L2
    if EVEN_K:
        if STREAM:
            return tl.load(rows + offs_k[None, :], eviction_policy="evict_first")
        return tl.load(rows + offs_k[None, :])
    k_ok = (offs_k < K)[None, :]
    if STREAM:
        return tl.load(rows + offs_k[None, :], mask=k_ok, other=0.0, eviction_policy="evict_first")
    return tl.load(rows + offs_k[None, :], mask=k_ok, other=0.0)


@triton.jit
def _k_step(acc, acc_u, acc2, acc2_u, x_rows, w_rows, u_rows, offs_k, K, EVEN_K: tl.constexpr,
            USE_DOT: tl.constexpr, DUAL: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    x = _load_k(x_rows, offs_k, K, EVEN_K, False)
    w = _load_k(w_rows, offs_k, K, EVEN_K, True)
    if DUAL:
        wu = _load_k(u_rows, offs_k, K, EVEN_K, True)
    if USE_DOT:
        acc = _dot_acc(acc, x, w, UPCAST, IEEE)
        if DUAL:
            acc_u = _dot_acc(acc_u, x, wu, UPCAST, IEEE)
    else:
        acc2 += w.to(tl.float32) * x.to(tl.float32)
        if DUAL:
            acc2_u += wu.to(tl.float32) * x.to(tl.float32)
    return acc, acc_u, acc2, acc2_u


@triton.jit
def _gemv(
    X, W, WU, Y, WS, CNT, M, N, K, k_iters, stride_xm, stride_wn, stride_wun, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    K_ITERS: tl.constexpr, EVEN_K: tl.constexpr, USE_DOT: tl.constexpr, DUAL: tl.constexpr,
    UPCAST: tl.constexpr, IEEE: tl.constexpr, STAGES: tl.constexpr,
):
    # y = x @ w^T, or with DUAL y = silu(x @ w^T) * (x @ wu^T), each product rounded to y's dtype first
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    n_c = tl.minimum(offs_n, N - 1).to(tl.int64)[:, None]  # clamped: loads need no row mask
    w_rows = W + n_c * stride_wn
    u_rows = WU + n_c * stride_wun
    x_rows = X + tl.minimum(offs_m, M - 1).to(tl.int64)[:, None] * stride_xm
    k_base = pid_k * (k_iters * BLOCK_K) + tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc2_u = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    if UPCAST:  # the interpreter (numpy >= 2.4) needs a constant trip count; the GPU a runtime one
        for i in tl.range(0, K_ITERS):
            acc, acc_u, acc2, acc2_u = _k_step(acc, acc_u, acc2, acc2_u, x_rows, w_rows, u_rows, k_base + i * BLOCK_K,
                                               K, EVEN_K, USE_DOT, DUAL, UPCAST, IEEE)
    else:
        for i in tl.range(0, k_iters, num_stages=STAGES):
            acc, acc_u, acc2, acc2_u = _k_step(acc, acc_u, acc2, acc2_u, x_rows, w_rows, u_rows, k_base + i * BLOCK_K,
                                               K, EVEN_K, USE_DOT, DUAL, UPCAST, IEEE)
    if not USE_DOT:
        acc = tl.reshape(tl.sum(acc2, axis=1), [1, BLOCK_N])
        acc_u = tl.reshape(tl.sum(acc2_u, axis=1), [1, BLOCK_N])
    out_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    if SPLIT_K > 1:
        # float32 partials [SPLIT_K, 2, BLOCK_M, N]; the last program of this tile to arrive reduces
        ws = WS + offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws + pid_k * (2 * BLOCK_M * N), acc, mask=out_mask)
        if DUAL:
            tl.store(ws + pid_k * (2 * BLOCK_M * N) + BLOCK_M * N, acc_u, mask=out_mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(CNT + pid_n, 1, sem="acq_rel")
        last = arrived == SPLIT_K - 1
        if last:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                acc += tl.load(ws + s * (2 * BLOCK_M * N), mask=out_mask, other=0.0, cache_modifier=".cg")
                if DUAL:
                    acc_u += tl.load(ws + s * (2 * BLOCK_M * N) + BLOCK_M * N, mask=out_mask, other=0.0,
                                     cache_modifier=".cg")
            tl.store(CNT + pid_n, 0)
        out_mask = out_mask & last
    ty = Y.dtype.element_ty
    if DUAL:  # silu(gate) * up with the reference's roundings: each projection, then silu, then the product
        g = acc.to(ty).to(tl.float32)
        u = acc_u.to(ty).to(tl.float32)
        y = ((g * tl.sigmoid(g)).to(ty).to(tl.float32) * u).to(ty)
    else:
        y = acc.to(ty)
    tl.store(Y + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :], y, mask=out_mask)


def _split_counters(module: torch.nn.Module, n_tiles: int, device: torch.device) -> torch.Tensor:
    """Zeroed int32 arrival counters for a split-K launch. COUNTERS = 1: one buffer kept on the module,
    allocated once (outside any graph: the eager warm-up call) and left zeroed by every launch (the last
    program of each tile resets its counter); kernels on one stream run one after another, so the
    block's GEMVs share it. COUNTERS = 0: a fresh buffer and its memset on every call."""
    if not COUNTERS:
        return torch.zeros((n_tiles,), dtype=torch.int32, device=device)
    held = getattr(module, "polymorph_split_counters", None)
    if held is None or held.numel() < n_tiles or held.device != device:
        module.polymorph_split_counters = torch.zeros((max(n_tiles, 8192),), dtype=torch.int32, device=device)
        held = module.polymorph_split_counters
    return held


def _launch(module: torch.nn.Module, x2: torch.Tensor, w: torch.Tensor, wu: torch.Tensor | None, y: torch.Tensor,
            block_n: int, block_k: int, split_k: int) -> None:
    m, k = x2.shape
    n = w.shape[0]
    use_dot = m > 1
    block_m = max(16, triton.next_power_of_2(m)) if use_dot else 1
    block_n = min(block_n, max(16, triton.next_power_of_2(n)))
    if use_dot:
        block_n = max(16, block_n)
    block_k = min(block_k, max(16, triton.next_power_of_2(k)))
    k_blocks = triton.cdiv(k, block_k)
    split = min(split_k, k_blocks)
    k_iters = triton.cdiv(k_blocks, split)
    split = triton.cdiv(k_blocks, k_iters)
    n_tiles = triton.cdiv(n, block_n)
    if split > 1:
        ws = torch.empty((split, 2, block_m, n), dtype=torch.float32, device=x2.device)
        cnt = _split_counters(module, n_tiles, x2.device)
    else:
        ws, cnt = y, y  # unused
    up = w if wu is None else wu
    _gemv[(n_tiles, split)](
        x2, w, up, y, ws, cnt, m, n, k, k_iters, x2.stride(0), w.stride(0), up.stride(0), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split,
        K_ITERS=k_iters if x2.device.type == "cpu" else 0,
        EVEN_K=k == k_iters * block_k * split, USE_DOT=use_dot, DUAL=wu is not None,
        UPCAST=x2.device.type == "cpu", IEEE=x2.dtype == torch.float32, STAGES=NUM_STAGES, num_warps=NUM_WARPS,
    )


def _gate_up(module: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate weight, up weight): the module's own, or the halves of its stacked copy (STACK = 1)."""
    w1, w3 = module.w1, module.w3
    if not STACK:
        return w1, w3
    key = (w1.data_ptr(), w3.data_ptr(), w1._version, w3._version, tuple(w1.shape), w1.dtype, w1.device)
    held = getattr(module, "polymorph_stacked_w13", None)  # (key, stacked weight) from an earlier call
    if held is None or held[0] != key:
        stacked = torch.cat([w1, w3]).contiguous()  # [2I, E], once per module and weight version
        module.polymorph_stacked_w13 = (key, stacked)
        held = module.polymorph_stacked_w13
    stacked = held[1]
    return stacked[: w1.shape[0]], stacked[w1.shape[0]:]


def kernel(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """module: a FeedForward (w1, w3 [I, E], w2 [E, I]); x [B, S, E] -> w2(silu(w1 x) * w3 x) [B, S, E]."""
    w1, w3, w2 = module.w1, module.w3, module.w2
    E = x.shape[-1]
    m = x.numel() // E if E else 0
    fast = (
        1 <= m <= MAX_M and x.dtype == w1.dtype == w3.dtype == w2.dtype and _float_16_or_32(x.dtype)
        and w1.shape == w3.shape and w1.shape[1] == E and w2.shape == (E, w1.shape[0])
        and w1.stride(1) == w3.stride(1) == w2.stride(1) == 1 and x.device == w1.device
    )
    if not fast:
        return type(module).forward(module, x)
    x2 = x.reshape(m, E)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    gate_w, up_w = _gate_up(module)
    h = torch.empty((m, w1.shape[0]), dtype=x.dtype, device=x.device)  # silu(gate) * up, [M, I]
    _launch(module, x2, gate_w, up_w, h, UP_BLOCK_N, UP_BLOCK_K, UP_SPLIT_K)
    y = torch.empty((*x.shape[:-1], E), dtype=x.dtype, device=x.device)
    _launch(module, h, w2, None, y.view(m, E), DOWN_BLOCK_N, DOWN_BLOCK_K, DOWN_SPLIT_K)
    return y
