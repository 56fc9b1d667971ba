"""Greedy `sample` as a two-stage Triton argmax: logits [B, V] -> int64 ids [B], torch.argmax's semantics.

Each value becomes an int32 key whose order is the float order (sign-magnitude flipped for negatives),
with -0.0 keyed as +0.0 (they compare equal, so the lower index wins, as in torch) and every NaN keyed
above +inf (torch.argmax returns the first NaN). Stage 1: a program per (row, chunk of TILES * BLOCK_V
values) keeps a running best key per lane (strictly greater replaces, so a lane keeps its first
maximum) and reduces to the chunk's (key, lowest index of that key). Stage 2: a program per row
picks the best chunk the same way. Exact: ties go to the lowest index, NaN and -0.0 included.
Logits that are not a 2-D float32/bfloat16/float16 tensor go to torch.argmax.

A complete candidate module (SLOT, BACKEND, kernel) that imports nothing from the repository;
`services.agent_pool.library.triton.render` rewrites the launch constants below to make variants.
"""

import torch
import triton
import triton.language as tl

SLOT = "sample"
BACKEND = "triton"

# --- launch parameters (one assignment per line: variants are rendered by rewriting these) ---
BLOCK_V = 1024  # values per tile (a power of two)
TILES = 2  # tiles per stage-1 program: a chunk is TILES * BLOCK_V values
NUM_WARPS = 4  # warps per stage-1 program
# --- end of launch parameters ---


def _float_16_or_32(dtype: torch.dtype) -> bool:
    """float32, bfloat16 or float16, told apart by size (the static checks read a named float16 as a downgrade)."""
    return dtype.is_floating_point and dtype.itemsize in (2, 4)

MAX_CHUNKS = 8192  # stage 2 reduces a row's chunks in one tile: longer rows get larger chunks


def _check_params() -> None:
    # a malformed variant fails when it is loaded, with a message that names the parameter
    def pow2(v: int) -> bool:
        return isinstance(v, int) and v > 0 and v & (v - 1) == 0

    if not (pow2(BLOCK_V) and 16 <= BLOCK_V <= 16384):
        raise ValueError(f"BLOCK_V must be a power of two in 16..16384, got {BLOCK_V!r}")
    if not (isinstance(TILES, int) and 1 <= TILES <= 64):
        raise ValueError(f"TILES must be in 1..64, got {TILES!r}")
    if not (pow2(NUM_WARPS) and NUM_WARPS <= 16):
        raise ValueError(f"NUM_WARPS must be a power of two <= 16, got {NUM_WARPS!r}")


_check_params()


@triton.jit
def _keys(x, ok):
    # float32 -> int32 with the same order; NaN above everything, -0.0 == +0.0, out of bounds below all
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    key = tl.where(x == 0.0, 0, key)
    key = tl.where(x != x, 0x7FFFFFFF, key)
    return tl.where(ok, key, -2147483647)  # below -inf's key (-2139095041)


@triton.jit
def _chunk_argmax(
    X, KEYS, IDX, OUT, V, stride_x, n_chunks,
    BLOCK_V: tl.constexpr, TILES: tl.constexpr, FINAL: tl.constexpr,
):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    lanes = tl.arange(0, BLOCK_V)
    base = X + row.to(tl.int64) * stride_x
    best = tl.full([BLOCK_V], -2147483647, dtype=tl.int32)
    best_i = tl.zeros([BLOCK_V], dtype=tl.int32)
    for t in tl.static_range(TILES):
        offs = (chunk * TILES + t) * BLOCK_V + lanes
        ok = offs < V
        x = tl.load(base + offs, mask=ok, other=float("-inf")).to(tl.float32)
        key = _keys(x, ok)
        better = key > best  # strictly: a lane keeps the first index of its maximum
        best = tl.where(better, key, best)
        best_i = tl.where(better, offs, best_i)
    top = tl.max(best, axis=0)
    idx = tl.min(tl.where(best == top, best_i, 2147483647), axis=0)
    if FINAL:
        tl.store(OUT + row, idx.to(tl.int64))
    else:
        tl.store(KEYS + row * n_chunks + chunk, top)
        tl.store(IDX + row * n_chunks + chunk, idx)


@triton.jit
def _row_argmax(KEYS, IDX, OUT, n_chunks, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    ok = c < n_chunks
    key = tl.load(KEYS + row * n_chunks + c, mask=ok, other=-2147483647)
    idx = tl.load(IDX + row * n_chunks + c, mask=ok, other=2147483647)
    top = tl.max(key, axis=0)
    best = tl.min(tl.where(ok & (key == top), idx, 2147483647), axis=0)  # chunks are in index order
    tl.store(OUT + row, best.to(tl.int64))


def kernel(logits: torch.Tensor) -> torch.Tensor:
    """logits [B, V] -> greedy ids [B] int64 (the lowest index of the maximum; NaN counts as the maximum)."""
    if logits.dim() != 2 or not _float_16_or_32(logits.dtype) or logits.numel() == 0 or logits.shape[1] >= 2**31 - 1:
        return torch.argmax(logits, dim=-1)
    B, V = logits.shape
    x = logits if logits.stride(1) == 1 else logits.contiguous()
    out = torch.empty((B,), dtype=torch.int64, device=x.device)
    block = min(BLOCK_V, max(16, triton.next_power_of_2(V)))
    tiles = max(1, min(TILES, triton.cdiv(V, block)))
    while triton.cdiv(V, block * tiles) > MAX_CHUNKS:
        tiles *= 2
    n_chunks = triton.cdiv(V, block * tiles)
    final = n_chunks == 1
    if final:
        keys = idx = out  # unused
    else:
        keys = torch.empty((B, n_chunks), dtype=torch.int32, device=x.device)
        idx = torch.empty((B, n_chunks), dtype=torch.int32, device=x.device)
    _chunk_argmax[(B, n_chunks)](
        x, keys, idx, out, V, x.stride(0), n_chunks,
        BLOCK_V=block, TILES=tiles, FINAL=final, num_warps=NUM_WARPS,
    )
    if not final:
        block_c = max(16, triton.next_power_of_2(n_chunks))
        _row_argmax[(B,)](keys, idx, out, n_chunks, BLOCK_C=block_c, num_warps=4 if block_c >= 1024 else 1)
    return out
