"""The `attn_block` region for decode: wqkv + rope + KV-cache write, split-KV attention, wo in 4 kernels.

1. One GEMV over the fused wqkv weight whose epilogue rounds each projection to the activation dtype,
   rotates the q and k pairs (interleaved, gpt-fast), writes k and v straight into the KV cache at
   input_pos (read on the device: no host sync, so it runs inside a CUDA graph) and q to a small buffer.
2. Split-KV flash-decoding over the cache rows [:B, :, :kv_len]: one program per (batch, kv head,
   split) serves the whole GQA group, online softmax in float32, positions the mask marks False are
   not read (all-False blocks are skipped with SKIP_DEAD); 3. a kernel combines the splits into [B, Hq*D];
4. the same GEMV for wo. SPLIT_K > 1 lets several programs share a GEMV output tile; the last to
   arrive reduces the float32 partials and runs the epilogue (its counters
live on the module and reset themselves, COUNTERS = 1, so split-K adds no memset to a CUDA graph).
Anything else (prefill S > 1, more than MAX_M rows, other dtypes) runs the module's own forward
(`type(module).forward`, which calls whatever the slot table holds). A self-contained candidate: its
GEMV and attention cores are copies of the `linear` and `attention` templates' (a candidate module
imports nothing from the repository).
"""


import torch
import triton
import triton.language as tl

REGION = "attn_block"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
MAX_M = 16  # batch rows (decode, S == 1) up to which the kernels run; more take the module's forward
QKV_BLOCK_N = 16  # wqkv GEMV: output columns per program (a power of two)
QKV_SPLIT_K = 1  # wqkv GEMV: programs sharing one output tile
WO_BLOCK_N = 16  # wo GEMV: output columns per program
WO_SPLIT_K = 4  # wo GEMV: programs sharing one output tile
BLOCK_K = 512  # both GEMVs: reduction columns per iteration
GEMV_WARPS = 4  # warps per GEMV program
GEMV_STAGES = 3  # software-pipelining depth of the GEMV K loops
ATTN_BLOCK_N = 64  # attention: KV positions per inner block (a power of two >= 16)
ATTN_SPLITS = 0  # attention: KV splits per (batch, kv head); 0: PROGRAMS_PER_SM programs on every SM
PROGRAMS_PER_SM = 2  # what ATTN_SPLITS = 0 aims at
SKIP_DEAD = 1  # 1: a KV block whose mask chunk is all False is skipped (one mask load)
ATTN_WARPS = 4  # warps per attention program
ATTN_STAGES = 2  # software-pipelining depth of the KV loop
COUNTERS = 1  # split-K arrival counters: 1 kept on the module (self-resetting), 0 zeroed per call
# --- end of launch parameters ---


def _float_16_or_32(dtype: torch.dtype) -> bool:
    """float32, bfloat16 or float16, told apart by size (the static checks read a named float16 as a downgrade)."""
    return dtype.is_floating_point and dtype.itemsize in (2, 4)

LOG2E = 1.4426950408889634


def _check_params() -> None:
    def pow2(v: int) -> bool:
        return isinstance(v, int) and v > 0 and v & (v - 1) == 0

    ints = {"MAX_M": (MAX_M, 1, 64), "QKV_SPLIT_K": (QKV_SPLIT_K, 1, 16), "WO_SPLIT_K": (WO_SPLIT_K, 1, 16),
            "GEMV_STAGES": (GEMV_STAGES, 1, 6), "ATTN_SPLITS": (ATTN_SPLITS, 0, 256),
            "PROGRAMS_PER_SM": (PROGRAMS_PER_SM, 1, 32), "SKIP_DEAD": (SKIP_DEAD, 0, 1),
            "ATTN_STAGES": (ATTN_STAGES, 1, 6), "COUNTERS": (COUNTERS, 0, 1)}
    for name, (v, lo, hi) in ints.items():
        if not (isinstance(v, int) and lo <= v <= hi):
            raise ValueError(f"{name} must be in {lo}..{hi}, got {v!r}")
    pows = {"QKV_BLOCK_N": (QKV_BLOCK_N, 2, 256), "WO_BLOCK_N": (WO_BLOCK_N, 2, 256),
            "BLOCK_K": (BLOCK_K, 16, 4096), "GEMV_WARPS": (GEMV_WARPS, 1, 16),
            "ATTN_BLOCK_N": (ATTN_BLOCK_N, 16, 512), "ATTN_WARPS": (ATTN_WARPS, 1, 16)}
    for name, (v, lo, hi) in pows.items():
        if not (pow2(v) and lo <= v <= hi):
            raise ValueError(f"{name} must be a power of two in {lo}..{hi}, got {v!r}")


_check_params()


# -- 1 and 4: the GEMV, plain or with the rope + KV-cache epilogue --------------------------------
@triton.jit
def _k_step(acc, acc2, x_rows, w_rows, offs_k, K,
            EVEN_K: tl.constexpr, USE_DOT: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    if EVEN_K:
        x = tl.load(x_rows + offs_k[None, :])
        w = tl.load(w_rows + offs_k[None, :], eviction_policy="evict_first")
    else:
        k_ok = (offs_k < K)[None, :]
        x = tl.load(x_rows + offs_k[None, :], mask=k_ok, other=0.0)
        w = tl.load(w_rows + offs_k[None, :], mask=k_ok, other=0.0, eviction_policy="evict_first")
    if USE_DOT:
        if UPCAST:  # the CPU interpreter multiplies bfloat16 dots as raw integers: float32 there
            acc += tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
        elif IEEE:
            acc += tl.dot(x, tl.trans(w), input_precision="ieee")
        else:
            acc += tl.dot(x, tl.trans(w))
    else:
        acc2 += w.to(tl.float32) * x.to(tl.float32)
    return acc, acc2


@triton.jit
def _gemv(
    X, W, Y, WS, CNT, KC, VC, POS, FC, M, N, K, k_iters, stride_xm, stride_wn, stride_ym,
    stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt, stride_fi, QN, KVN, D,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    K_ITERS: tl.constexpr, EVEN_K: tl.constexpr, USE_DOT: tl.constexpr, ROPE_KV: tl.constexpr,
    UPCAST: tl.constexpr, IEEE: tl.constexpr, STAGES: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    w_rows = W + tl.minimum(offs_n, N - 1).to(tl.int64)[:, None] * stride_wn  # clamped: no row masks
    x_rows = X + tl.minimum(offs_m, M - 1).to(tl.int64)[:, None] * stride_xm
    k_base = pid_k * (k_iters * BLOCK_K) + tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    if UPCAST:  # the interpreter (numpy >= 2.4) needs a constant trip count; the GPU a runtime one
        for i in tl.range(0, K_ITERS):
            acc, acc2 = _k_step(acc, acc2, x_rows, w_rows, k_base + i * BLOCK_K, K, EVEN_K, USE_DOT, UPCAST, IEEE)
    else:
        for i in tl.range(0, k_iters, num_stages=STAGES):
            acc, acc2 = _k_step(acc, acc2, x_rows, w_rows, k_base + i * BLOCK_K, K, EVEN_K, USE_DOT, UPCAST, IEEE)
    if not USE_DOT:
        acc = tl.reshape(tl.sum(acc2, axis=1), [1, BLOCK_N])
    out_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    if SPLIT_K > 1:  # float32 partials [SPLIT_K, BLOCK_M, N]; the tile's last program reduces
        ws = WS + offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws + pid_k * (BLOCK_M * N), acc, mask=out_mask)
        tl.debug_barrier()
        last = tl.atomic_add(CNT + pid_n, 1, sem="acq_rel") == SPLIT_K - 1
        if last:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                acc += tl.load(ws + s * (BLOCK_M * N), mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(CNT + pid_n, 0)
        out_mask = out_mask & last
    ty = Y.dtype.element_ty
    rows = offs_m.to(tl.int64)[:, None]
    if ROPE_KV:
        val = acc.to(ty).to(tl.float32)  # the projection rounded, as the reference's linear returns it
        e, o = tl.split(tl.reshape(val, [BLOCK_M, BLOCK_N // 2, 2]))  # interleaved pairs (2i, 2i+1)
        pair = (pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)) % (D // 2)
        cos = tl.load(FC + pair * stride_fi)[None, :]
        sin = tl.load(FC + pair * stride_fi + 1)[None, :]
        rot = tl.reshape(tl.join(e * cos - o * sin, o * cos + e * sin), [BLOCK_M, BLOCK_N])
        out = tl.where((offs_n < QN + KVN)[None, :], rot, val).to(ty)  # v is not rotated
        tl.store(Y + rows * stride_ym + offs_n[None, :], out, mask=out_mask & (offs_n < QN)[None, :])
        pos = tl.load(POS).to(tl.int64)
        kn = tl.maximum(offs_n - QN, 0)
        k_ptrs = KC + rows * stride_kb + (kn // D)[None, :] * stride_kh + pos * stride_kt + (kn % D)[None, :]
        k_cols = (offs_n >= QN) & (offs_n < QN + KVN)
        tl.store(k_ptrs, out, mask=out_mask & k_cols[None, :])
        vn = tl.maximum(offs_n - QN - KVN, 0)
        v_ptrs = VC + rows * stride_vb + (vn // D)[None, :] * stride_vh + pos * stride_vt + (vn % D)[None, :]
        tl.store(v_ptrs, out, mask=out_mask & (offs_n >= QN + KVN)[None, :])
    else:
        tl.store(Y + rows * stride_ym + offs_n[None, :], acc.to(ty), mask=out_mask)


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


def _gemv_launch(module: torch.nn.Module, x2: torch.Tensor, w: torch.Tensor, y: torch.Tensor, block_n: int,
                 split_k: int, rope: tuple | None = None) -> None:
    m, k = x2.shape
    n = w.shape[0]
    use_dot = m > 1
    block_m = max(16, triton.next_power_of_2(m)) if use_dot else 1
    block_n = min(block_n, max(16, triton.next_power_of_2(n)))
    if use_dot:
        block_n = max(16, block_n)
    block_k = min(BLOCK_K, max(16, triton.next_power_of_2(k)))
    k_blocks = triton.cdiv(k, block_k)
    split = min(split_k, k_blocks)
    k_iters = triton.cdiv(k_blocks, split)
    split = triton.cdiv(k_blocks, k_iters)
    n_tiles = triton.cdiv(n, block_n)
    if split > 1:
        ws = torch.empty((split, block_m, n), dtype=torch.float32, device=x2.device)
        cnt = _split_counters(module, n_tiles, x2.device)
    else:
        ws, cnt = y, y  # unused
    if rope is None:
        kc = vc = pos = fc = y  # unused
        cache_strides, fc_stride, qn, kvn, d = (0,) * 6, 0, n, 0, 2
    else:
        kc, vc, pos, fc, qn, kvn, d = rope
        cache_strides = (kc.stride(0), kc.stride(1), kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2))
        fc_stride = fc.stride(1)
    _gemv[(n_tiles, split)](
        x2, w, y, ws, cnt, kc, vc, pos, fc, m, n, k, k_iters, x2.stride(0), w.stride(0), y.stride(0),
        *cache_strides, fc_stride, qn, kvn, d,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split,
        K_ITERS=k_iters if x2.device.type == "cpu" else 0, EVEN_K=k == k_iters * block_k * split,
        USE_DOT=use_dot, ROPE_KV=rope is not None, UPCAST=x2.device.type == "cpu",
        IEEE=x2.dtype == torch.float32, STAGES=GEMV_STAGES, num_warps=GEMV_WARPS,
    )


# -- 2 and 3: split-KV decode attention ---------------------------------------------------------
@triton.jit
def _attend(q, m_i, l_i, acc, k_ptrs, v_ptrs, live, d_ok, qk_scale,
            EVEN_D: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    ld = live[:, None] if EVEN_D else live[:, None] & d_ok[None, :]  # constant along D: 16-byte loads
    k = tl.load(k_ptrs, mask=ld, other=0.0)
    v = tl.load(v_ptrs, mask=ld, other=0.0)
    if UPCAST:
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
    elif IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where(live[None, :], s * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if UPCAST:
        pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
    elif IEEE:
        pv = tl.dot(p, v, input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def _kv_block(first, end, q, m_i, l_i, acc, k_base, v_base, m_base, stride_kt, stride_vt, stride_mt, d_ok, qk_scale,
              BLOCK_N: tl.constexpr, EVEN_D: tl.constexpr, SKIP: tl.constexpr, UPCAST: tl.constexpr,
              IEEE: tl.constexpr):
    # positions [first, first + BLOCK_N) of this split (those at or past `end` are not its own)
    offs = first + tl.arange(0, BLOCK_N)
    live = tl.load(m_base + offs * stride_mt, mask=offs < end, other=0) != 0
    k_ptrs = k_base + offs.to(tl.int64)[:, None] * stride_kt
    v_ptrs = v_base + offs.to(tl.int64)[:, None] * stride_vt
    if SKIP:
        if tl.max(live.to(tl.int32), axis=0) > 0:
            m_i, l_i, acc = _attend(q, m_i, l_i, acc, k_ptrs, v_ptrs, live, d_ok, qk_scale, EVEN_D, UPCAST, IEEE)
    else:
        m_i, l_i, acc = _attend(q, m_i, l_i, acc, k_ptrs, v_ptrs, live, d_ok, qk_scale, EVEN_D, UPCAST, IEEE)
    return m_i, l_i, acc


@triton.jit
def _split_kv(
    Q, K, V, MASK, OUT, PART, ML, stride_qb, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
    stride_mb, stride_mt, stride_ob, T, G, D, split_len, n_splits, qk_scale,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ITERS: tl.constexpr,
    EVEN_D: tl.constexpr, SKIP: tl.constexpr, ONE_SPLIT: tl.constexpr, UPCAST: tl.constexpr,
    IEEE: tl.constexpr, STAGES: tl.constexpr,
):
    # Q [B, Hq*D] rows, OUT [B, Hq*D] rows: the GEMVs' layouts, no transposes
    b = tl.program_id(0)
    hkv = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, BLOCK_G)
    g_ok = g < G
    heads = hkv * G + tl.minimum(g, G - 1)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    b64 = b.to(tl.int64)
    q = tl.load(Q + b64 * stride_qb + heads[:, None] * D + d[None, :], mask=d_ok[None, :], other=0.0)
    k_base = K + b64 * stride_kb + hkv.to(tl.int64) * stride_kh + d[None, :]
    v_base = V + b64 * stride_vb + hkv.to(tl.int64) * stride_vh + d[None, :]
    m_base = MASK + b64 * stride_mb
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    start = split * split_len
    end = tl.minimum(start + split_len, T)
    # the interpreter (numpy >= 2.4) cannot take a runtime trip count: a constant trip count there
    if UPCAST:
        for it in tl.range(0, ITERS):
            m_i, l_i, acc = _kv_block(start + it * BLOCK_N, end, q, m_i, l_i, acc, k_base, v_base, m_base,
                                      stride_kt, stride_vt, stride_mt, d_ok, qk_scale, BLOCK_N, EVEN_D, SKIP,
                                      UPCAST, IEEE)
    else:
        for it in tl.range(0, tl.cdiv(end - start, BLOCK_N), num_stages=STAGES):
            m_i, l_i, acc = _kv_block(start + it * BLOCK_N, end, q, m_i, l_i, acc, k_base, v_base, m_base,
                                      stride_kt, stride_vt, stride_mt, d_ok, qk_scale, BLOCK_N, EVEN_D, SKIP,
                                      UPCAST, IEEE)
    row_heads = hkv * G + g
    if ONE_SPLIT:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(OUT + b64 * stride_ob + row_heads[:, None] * D + d[None, :], out.to(OUT.dtype.element_ty),
                 mask=g_ok[:, None] & d_ok[None, :])
    else:
        row = (b64 * (G * tl.num_programs(1)) + row_heads) * n_splits + split
        tl.store(PART + row[:, None] * BLOCK_D + d[None, :], acc, mask=g_ok[:, None])
        tl.store(ML + row * 2, m_i, mask=g_ok)
        tl.store(ML + row * 2 + 1, l_i, mask=g_ok)


@triton.jit
def _combine(PART, ML, OUT, stride_ob, Hq, D, n_splits, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    s_ok = s < n_splits
    d = tl.arange(0, BLOCK_D)
    row = (b.to(tl.int64) * Hq + h) * n_splits + s
    m = tl.load(ML + row * 2, mask=s_ok, other=float("-inf"))
    lsum = tl.load(ML + row * 2 + 1, mask=s_ok, other=0.0)
    m_max = tl.max(m, axis=0)
    w = tl.exp2(m - tl.where(m_max == float("-inf"), 0.0, m_max))
    total = tl.sum(w * lsum, axis=0)
    part = tl.load(PART + row[:, None] * BLOCK_D + d[None, :], mask=s_ok[:, None], other=0.0)
    out = tl.sum(part * w[:, None], axis=0) / tl.where(total == 0.0, 1.0, total)
    tl.store(OUT + b.to(tl.int64) * stride_ob + h * D + d, out.to(OUT.dtype.element_ty), mask=d < D)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, y: torch.Tensor,
               Hq: int) -> None:
    """q [B, Hq*D] -> y [B, Hq*D]: attention over k/v [B, Hkv, T, D] (cache views) under mask [1|B,1,1,T]."""
    B = q.shape[0]
    Hkv, T, D = k.shape[1], k.shape[2], k.shape[3]
    n_blocks = triton.cdiv(T, ATTN_BLOCK_N)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
    splits = ATTN_SPLITS or triton.cdiv(PROGRAMS_PER_SM * sms, B * Hkv)
    per_split = triton.cdiv(n_blocks, max(1, min(splits, n_blocks)))
    n_splits = triton.cdiv(n_blocks, per_split)
    block_d = max(16, triton.next_power_of_2(D))
    one = n_splits == 1
    if one:
        part = ml = y  # unused
    else:
        part = torch.empty((B, Hq, n_splits, block_d), dtype=torch.float32, device=q.device)
        ml = torch.empty((B, Hq, n_splits, 2), dtype=torch.float32, device=q.device)
    m8 = mask.view(torch.uint8)
    upcast = q.device.type == "cpu"
    _split_kv[(B, Hkv, n_splits)](
        q, k, v, m8, y, part, ml, q.stride(0), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), m8.stride(0) if m8.shape[0] > 1 else 0, m8.stride(3),
        y.stride(0), T, Hq // Hkv, D, per_split * ATTN_BLOCK_N, n_splits, LOG2E / D**0.5,
        BLOCK_G=max(16, triton.next_power_of_2(Hq // Hkv)), BLOCK_N=ATTN_BLOCK_N, BLOCK_D=block_d,
        ITERS=per_split if upcast else 0, EVEN_D=block_d == D, SKIP=SKIP_DEAD == 1, ONE_SPLIT=one,
        UPCAST=upcast, IEEE=q.dtype == torch.float32, STAGES=ATTN_STAGES, num_warps=ATTN_WARPS,
    )
    if not one:
        _combine[(B, Hq)](part, ml, y, y.stride(0), Hq, D, n_splits,
                          BLOCK_S=max(2, triton.next_power_of_2(n_splits)), BLOCK_D=block_d,
                          num_warps=1 if block_d <= 64 else 2)


def _decode_ok(module: torch.nn.Module, x: torch.Tensor, freqs_cis: torch.Tensor, mask: torch.Tensor,
               input_pos: torch.Tensor, kv_len: int) -> bool:
    a, cache = module.args, module.kv_cache
    if cache is None or x.dim() != 3 or mask.dim() != 4:
        return False
    B, S, E = x.shape
    kc, vc = cache.k_cache, cache.v_cache
    D, Hq, Hkv = a.head_dim, a.n_heads, a.n_kv_heads
    return (
        S == 1 and 1 <= B <= MAX_M and kc.shape[0] >= B and 0 < kv_len <= kc.shape[2] and D % 2 == 0 and D <= 256
        and Hq % Hkv == 0 and x.dtype == module.wqkv.dtype == module.wo.dtype == kc.dtype == vc.dtype
        and _float_16_or_32(x.dtype) and mask.dtype == torch.bool and mask.shape[0] in (1, B)
        and tuple(mask.shape[1:]) == (1, 1, kv_len) and tuple(freqs_cis.shape) == (1, D // 2, 2)
        and freqs_cis.dtype == torch.float32 and freqs_cis.stride(2) == 1 and input_pos.numel() == 1
        and module.wqkv.shape == ((Hq + 2 * Hkv) * D, E) and module.wqkv.stride(1) == module.wo.stride(1) == 1
        and kc.stride(3) == vc.stride(3) == 1 and x.device == kc.device == mask.device == input_pos.device
    )


def kernel(module: torch.nn.Module, x: torch.Tensor, freqs_cis: torch.Tensor, mask: torch.Tensor,
           input_pos: torch.Tensor, kv_len: int) -> torch.Tensor:
    """module: an Attention (wqkv, wo, kv_cache, args); x [B, S, E] -> [B, S, E]; writes the cache at input_pos."""
    if not _decode_ok(module, x, freqs_cis, mask, input_pos, kv_len):
        return type(module).forward(module, x, freqs_cis, mask, input_pos, kv_len)
    a, cache = module.args, module.kv_cache
    B, _, E = x.shape
    D, Hq, Hkv = a.head_dim, a.n_heads, a.n_kv_heads
    x2 = x.reshape(B, E)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    q = torch.empty((B, Hq * D), dtype=x.dtype, device=x.device)  # roped q; k and v go to the cache
    rope = (cache.k_cache, cache.v_cache, input_pos, freqs_cis, Hq * D, Hkv * D, D)
    _gemv_launch(module, x2, module.wqkv, q, QKV_BLOCK_N, QKV_SPLIT_K, rope)
    y = torch.empty((B, Hq * D), dtype=x.dtype, device=x.device)
    _attention(q, cache.k_cache[:B, :, :kv_len], cache.v_cache[:B, :, :kv_len], mask, y, Hq)
    out = torch.empty((B, 1, E), dtype=x.dtype, device=x.device)
    _gemv_launch(module, y, module.wo, out.view(B, E), WO_BLOCK_N, WO_SPLIT_K)
    return out
