"""Split-KV flash-decoding for the `attention` slot: softmax(q k^T / sqrt(D)) v with a boolean mask.

Decode (S == 1) is memory-bound on K and V, so one program per (batch, kv head, KV split) loads each
K/V block once for all Hq/Hkv query heads of its group (GQA), keeps an online softmax in float32
(running max subtracted, exp2 with log2(e) folded into the scale) and writes an unnormalised partial;
a second kernel combines the splits. Positions the mask marks False are never loaded (masked loads
issue no memory traffic) and, with SKIP_DEAD, a block whose mask chunk is all False is skipped
outright: inside a CUDA graph captured at the full static cache, only the live context is read.
A row with no live position gives 0, as torch's SDPA does. q, k, v and the mask may be strided
views (the cache's [:B, :, :T] slices): every stride is passed through. Prefill (S > 1), float
masks, other dtypes or shapes go to F.scaled_dot_product_attention, the slot's reference.

A complete candidate module (SLOT, BACKEND, kernel) that imports nothing from the repository;
`services.agent_pool.library.triton.render` rewrites the launch constants below to make variants.
"""


import torch
import torch.nn.functional as F
import triton
import triton.language as tl

SLOT = "attention"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
BLOCK_N = 64  # KV positions per inner block (a power of two >= 16)
SPLITS = 0  # KV splits per (batch, kv head); 0: enough for PROGRAMS_PER_SM programs on every SM
PROGRAMS_PER_SM = 2  # the programs per SM SPLITS = 0 aims at
SKIP_DEAD = 1  # 1: a block whose mask chunk is all False costs one mask load (no K/V loads, no math)
NUM_WARPS = 4  # warps per split program
NUM_STAGES = 2  # software-pipelining depth of the KV loop
# --- end of launch parameters ---


def _float_16_or_32(dtype: torch.dtype) -> bool:
    """float32, bfloat16 or float16, told apart by size (the static checks read a named float16 as a downgrade)."""
    return dtype.is_floating_point and dtype.itemsize in (2, 4)

LOG2E = 1.4426950408889634


def _check_params() -> None:
    # a malformed variant fails when it is loaded, with a message that names the parameter
    def pow2(v: int) -> bool:
        return isinstance(v, int) and v > 0 and v & (v - 1) == 0

    if not (pow2(BLOCK_N) and 16 <= BLOCK_N <= 512):
        raise ValueError(f"BLOCK_N must be a power of two in 16..512, got {BLOCK_N!r}")
    if not (isinstance(SPLITS, int) and 0 <= SPLITS <= 256):
        raise ValueError(f"SPLITS must be in 0..256, got {SPLITS!r}")
    if not (isinstance(PROGRAMS_PER_SM, int) and 1 <= PROGRAMS_PER_SM <= 32):
        raise ValueError(f"PROGRAMS_PER_SM must be in 1..32, got {PROGRAMS_PER_SM!r}")
    if SKIP_DEAD not in (0, 1):
        raise ValueError(f"SKIP_DEAD must be 0 or 1, got {SKIP_DEAD!r}")
    if not (pow2(NUM_WARPS) and NUM_WARPS <= 16):
        raise ValueError(f"NUM_WARPS must be a power of two <= 16, got {NUM_WARPS!r}")
    if not (isinstance(NUM_STAGES, int) and 1 <= NUM_STAGES <= 6):
        raise ValueError(f"NUM_STAGES must be in 1..6, got {NUM_STAGES!r}")


_check_params()


@triton.jit
def _attend(q, m_i, l_i, acc, k_ptrs, v_ptrs, live, d_ok, qk_scale,
            EVEN_D: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    # one KV block: scores [BG, BN], online-softmax update of (m_i, l_i, acc)
    ld = live[:, None] if EVEN_D else live[:, None] & d_ok[None, :]  # constant along D: 16-byte loads
    k = tl.load(k_ptrs, mask=ld, other=0.0)  # [BN, BD]
    v = tl.load(v_ptrs, mask=ld, other=0.0)
    if UPCAST:  # the CPU interpreter multiplies bfloat16 dots as raw integers: float32 there
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
    elif IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where(live[None, :], s * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no live position yet: no NaN from -inf - -inf
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
    Q, K, V, MASK, OUT, PART, ML,
    stride_qb, stride_qh, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
    stride_mb, stride_mt, stride_ob, stride_oh,
    T, G, D, split_len, n_splits, qk_scale,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ITERS: tl.constexpr,
    EVEN_D: tl.constexpr, SKIP: tl.constexpr, ONE_SPLIT: tl.constexpr, UPCAST: tl.constexpr,
    IEEE: tl.constexpr, STAGES: tl.constexpr,
):
    b = tl.program_id(0)
    hkv = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, BLOCK_G)
    g_ok = g < G
    heads = hkv * G + tl.minimum(g, G - 1)  # clamped: padded query rows load a real head, never stored
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    b64 = b.to(tl.int64)
    q = tl.load(Q + b64 * stride_qb + heads[:, None] * stride_qh + d[None, :],
                mask=d_ok[None, :], other=0.0)  # [BG, BD]
    k_base = K + b64 * stride_kb + hkv.to(tl.int64) * stride_kh + d[None, :]  # the head dim is contiguous
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
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # no live position: 0, as SDPA gives
        o_ptrs = OUT + b64 * stride_ob + row_heads[:, None] * stride_oh + d[None, :]
        tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])
    else:
        # partials: PART [B, Hq, n_splits, BLOCK_D] float32, ML [B, Hq, n_splits, 2] (max, sum)
        row = (b64 * (G * tl.num_programs(1)) + row_heads) * n_splits + split
        tl.store(PART + row[:, None] * BLOCK_D + d[None, :], acc, mask=g_ok[:, None])
        tl.store(ML + row * 2, m_i, mask=g_ok)
        tl.store(ML + row * 2 + 1, l_i, mask=g_ok)


@triton.jit
def _combine(
    PART, ML, OUT, stride_ob, stride_oh, Hq, D, n_splits,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    s_ok = s < n_splits
    d = tl.arange(0, BLOCK_D)
    row = (b.to(tl.int64) * Hq + h) * n_splits + s
    m = tl.load(ML + row * 2, mask=s_ok, other=float("-inf"))
    lsum = tl.load(ML + row * 2 + 1, mask=s_ok, other=0.0)
    m_max = tl.max(m, axis=0)
    w = tl.exp2(m - tl.where(m_max == float("-inf"), 0.0, m_max))  # a split with no live position: 0
    total = tl.sum(w * lsum, axis=0)
    part = tl.load(PART + row[:, None] * BLOCK_D + d[None, :], mask=s_ok[:, None], other=0.0)
    out = tl.sum(part * w[:, None], axis=0) / tl.where(total == 0.0, 1.0, total)
    o_ptrs = OUT + b.to(tl.int64) * stride_ob + h * stride_oh + d
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=d < D)


def _fast_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> bool:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or mask.dim() != 4:
        return False
    B, Hq, S, D = q.shape
    _, Hkv, T, _ = k.shape
    return (
        S == 1 and T > 0 and B > 0 and Hkv > 0 and Hq % Hkv == 0 and tuple(k.shape) == (B, Hkv, T, D)
        and v.shape == k.shape and q.dtype == k.dtype == v.dtype and _float_16_or_32(q.dtype)
        and mask.dtype == torch.bool and mask.shape[0] in (1, B) and tuple(mask.shape[1:]) == (1, 1, T)
        and q.device == k.device == v.device == mask.device and 0 < D <= 256
        and q.stride(3) == k.stride(3) == v.stride(3) == 1  # a strided head dim: SDPA
    )


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [B,Hq,S,D], k/v [B,Hkv,T,D], mask [1|B,1,S,T] bool -> [B,Hq,S,D] in q.dtype."""
    if not _fast_path(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.size(1) != k.size(1))
    B, Hq, _, D = q.shape
    Hkv, T = k.shape[1], k.shape[2]
    G = Hq // Hkv
    out = torch.empty((B, Hq, 1, D), dtype=q.dtype, device=q.device)
    n_blocks = triton.cdiv(T, BLOCK_N)
    splits = SPLITS or triton.cdiv(PROGRAMS_PER_SM * _sm_count(q.device), B * Hkv)
    per_split = triton.cdiv(n_blocks, max(1, min(splits, n_blocks)))  # KV blocks per split
    n_splits = triton.cdiv(n_blocks, per_split)
    block_d = max(16, triton.next_power_of_2(D))
    one = n_splits == 1
    if one:
        part = ml = out  # unused
    else:
        part = torch.empty((B, Hq, n_splits, block_d), dtype=torch.float32, device=q.device)
        ml = torch.empty((B, Hq, n_splits, 2), dtype=torch.float32, device=q.device)
    m8 = mask.view(torch.uint8)  # same strides, a byte per position
    stride_mb = m8.stride(0) if m8.shape[0] > 1 else 0
    upcast, ieee = q.device.type == "cpu", q.dtype == torch.float32
    _split_kv[(B, Hkv, n_splits)](
        q, k, v, m8, out, part, ml,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        stride_mb, m8.stride(3), out.stride(0), out.stride(1),
        T, G, D, per_split * BLOCK_N, n_splits, LOG2E / D**0.5,
        # on a GPU the trip count is a runtime value: one compile serves every context length
        BLOCK_G=max(16, triton.next_power_of_2(G)), BLOCK_N=BLOCK_N, BLOCK_D=block_d,
        ITERS=per_split if upcast else 0, EVEN_D=block_d == D, SKIP=SKIP_DEAD == 1, ONE_SPLIT=one,
        UPCAST=upcast, IEEE=ieee, STAGES=NUM_STAGES, num_warps=NUM_WARPS,
    )
    if not one:
        _combine[(B, Hq)](
            part, ml, out, out.stride(0), out.stride(1), Hq, D, n_splits,
            BLOCK_S=max(2, triton.next_power_of_2(n_splits)), BLOCK_D=block_d, num_warps=1 if block_d <= 64 else 2,
        )
    return out
