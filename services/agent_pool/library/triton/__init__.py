"""Triton kernel templates for the search agents: one module per op, variants rendered from launch constants.

Each op file in this folder (rmsnorm.py, add_rmsnorm.py, silu_mul.py, rope.py; decode_attention.py for the
`attention` slot, gemv.py for `linear`, argmax.py for `sample`; regions/mlp_block.py,
regions/attn_block.py and regions/layer.py for the fused regions) is a complete candidate module.
Its launch constants sit one per line between the "launch parameters" markers; `render` rewrites
them to make a variant, so every variant is a distinct, self-contained source text (the candidate id
is a hash of it). Reading the templates needs no triton: only loading a candidate does.
"""

from __future__ import annotations

import itertools
import re
from functools import cache
from pathlib import Path

_HERE = Path(__file__).resolve().parent
TEMPLATES: dict[str, str] = {slot: f"{slot}.py" for slot in ("rmsnorm", "add_rmsnorm", "silu_mul", "rope")}
TEMPLATES.update({  # slot or region name -> file: the decode kernels (benchmarks/kernels_h200.py times them)
    "attention": "decode_attention.py", "linear": "gemv.py", "sample": "argmax.py",
    "mlp_block": "regions/mlp_block.py", "attn_block": "regions/attn_block.py", "layer": "regions/layer.py",
})
_BEGIN = "# --- launch parameters"
_END = "# --- end of launch parameters ---"
_ASSIGN = re.compile(r"^([A-Z][A-Z0-9_]*) = ([^#\n]*?)(\s*#.*)?$", re.MULTILINE)
_VALUE = re.compile(r"^-?\d+$")  # launch constants are integers: nothing else can be injected


@cache
def template(slot: str) -> str:
    """The source text of the op's default candidate (its launch constants as written in the file)."""
    if slot not in TEMPLATES:
        raise KeyError(f"no Triton template for slot {slot!r}; have {sorted(TEMPLATES)}")
    return (_HERE / TEMPLATES[slot]).read_text()


def _param_block(source: str) -> tuple[int, int]:
    start, end = source.find(_BEGIN), source.find(_END)
    if start < 0 or end < start:
        raise ValueError("template has no launch-parameter block")
    return start, end


def defaults(slot: str) -> dict[str, str]:
    """The launch constants of an op's template, by name, as written in its source."""
    source = template(slot)
    start, end = _param_block(source)
    return {m.group(1): m.group(2).strip() for m in _ASSIGN.finditer(source, start, end)}


def render(slot: str, params: dict[str, str]) -> str:
    """The op's module text with the given launch constants substituted (the others keep their defaults).

    Raises ValueError for an unknown name or a value that is not an integer literal.
    """
    source = template(slot)
    known = defaults(slot)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"{slot}: unknown launch parameters {unknown}; known {sorted(known)}")
    for name, value in params.items():
        if not _VALUE.match(str(value).strip()):
            raise ValueError(f"{slot}: {name} must be an integer literal, got {value!r}")
    start, end = _param_block(source)

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in params:
            return m.group(0)
        return f"{name} = {str(params[name]).strip()}{m.group(3) or ''}"

    return source[:start] + _ASSIGN.sub(sub, source[start:end]) + source[end:]


def _norm_grid() -> list[dict[str, int]]:
    # whole-row tiles: warps across one row, or 2/4 rows per program for many short rows (prefill);
    # chunked tiles: a loop over E in fixed chunks, which bounds registers for wide models.
    grid = [dict(NUM_WARPS=w, ROWS_PER_PROGRAM=1, BLOCK_E=0) for w in (1, 2, 4, 8, 16)]
    grid += [dict(NUM_WARPS=w, ROWS_PER_PROGRAM=r, BLOCK_E=0) for w in (4, 8, 16) for r in (2, 4)]
    grid += [
        dict(NUM_WARPS=w, ROWS_PER_PROGRAM=1, BLOCK_E=b, NUM_STAGES=s)
        for b in (1024, 2048) for w in (2, 4, 8) for s in (1, 3)
    ]
    grid += [dict(NUM_WARPS=w, ROWS_PER_PROGRAM=2, BLOCK_E=1024, NUM_STAGES=2) for w in (4, 8)]
    return grid


def _silu_grid() -> list[dict[str, int]]:
    # keep 2..64 elements per thread (16-byte vectors up to a few per thread, no spills)
    grid = []
    for block, warps in itertools.product((256, 512, 1024, 2048, 4096), (1, 2, 4, 8, 16)):
        per_thread = block // (warps * 32)
        if 2 <= per_thread <= 64:
            grid.append(dict(NUM_WARPS=warps, ROWS_PER_PROGRAM=1, BLOCK_I=block))
    grid += [dict(NUM_WARPS=w, ROWS_PER_PROGRAM=r, BLOCK_I=1024) for w in (4, 8) for r in (2, 4)]
    return grid


def _rope_grid() -> list[dict[str, int]]:
    # a Llama token has 8 KV heads and 32 query heads of 64 dims: 1-32 heads per program
    return [dict(NUM_WARPS=w, BLOCK_H=h) for h in (1, 4, 8, 32) for w in (1, 2) if h * 32 >= 32 * w]


def _gemv_grid() -> list[dict[str, int]]:
    # decode's weight streams: enough programs in flight (small tiles, split-K for the narrow
    # projections) against few registers per thread; tiles of up to 32k elements stay unspilled
    grid = []
    for bn, bk, split in itertools.product((8, 16, 32, 64), (256, 512, 1024), (1, 2, 4, 8)):
        if bn * bk <= 32768 and not (split > 2 and bn > 32):
            grid.append(dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, NUM_WARPS=4 if bn * bk <= 16384 else 8,
                             NUM_STAGES=3))
    grid += [dict(BLOCK_N=16, BLOCK_K=512, SPLIT_K=s, NUM_WARPS=4, NUM_STAGES=st) for s in (1, 4) for st in (2, 4)]
    grid += [dict(MAX_M=64, BLOCK_N=bn, BLOCK_K=256, SPLIT_K=1, NUM_WARPS=4, NUM_STAGES=3) for bn in (32, 64)]
    return grid


def _attention_grid() -> list[dict[str, int]]:
    grid = [dict(BLOCK_N=bn, SPLITS=0, PROGRAMS_PER_SM=p, SKIP_DEAD=1, NUM_WARPS=w, NUM_STAGES=2)
            for bn in (32, 64, 128) for p in (1, 2, 4) for w in (2, 4)]
    grid += [dict(BLOCK_N=64, SPLITS=s, SKIP_DEAD=1, NUM_WARPS=4, NUM_STAGES=2) for s in (1, 4, 16)]
    grid += [dict(BLOCK_N=bn, SPLITS=0, PROGRAMS_PER_SM=2, SKIP_DEAD=0, NUM_WARPS=4, NUM_STAGES=st)
             for bn in (64, 128) for st in (2, 3)]
    return grid


def _argmax_grid() -> list[dict[str, int]]:
    return [dict(BLOCK_V=b, TILES=t, NUM_WARPS=w) for b in (512, 1024, 2048, 4096) for t in (1, 2, 4) for w in (4, 8)
            if b * t <= 8192]


def _mlp_block_grid() -> list[dict[str, int]]:
    grid = [dict(UP_BLOCK_N=un, UP_BLOCK_K=512, UP_SPLIT_K=1, DOWN_BLOCK_N=dn, DOWN_SPLIT_K=ds, NUM_STAGES=3)
            for un in (8, 16, 32) for dn in (8, 16) for ds in (1, 2, 4)]
    grid += [dict(STACK=1, UP_BLOCK_N=16, DOWN_BLOCK_N=16, DOWN_SPLIT_K=4)]  # the stacked-weight layout
    grid += [dict(COUNTERS=0, DOWN_SPLIT_K=4)]  # split-K counters zeroed per call (a memset) instead of kept
    return grid


def _attn_block_grid() -> list[dict[str, int]]:
    grid = [dict(QKV_BLOCK_N=qn, QKV_SPLIT_K=qs, WO_BLOCK_N=16, WO_SPLIT_K=ws, ATTN_BLOCK_N=ab, PROGRAMS_PER_SM=p)
            for qn in (8, 16) for qs in (1, 2) for ws in (2, 4) for ab in (32, 64) for p in (2, 4)]
    return [*grid, dict(COUNTERS=0)]


def _layer_grid() -> list[dict[str, int]]:
    # the four GEMVs' tiles start from the attn_block/mlp_block optima; vary the split-K and attention
    grid = [dict(WO_SPLIT_K=ws, DOWN_SPLIT_K=ds, PROGRAMS_PER_SM=p)
            for ws in (1, 2, 4) for ds in (1, 2) for p in (2, 4)]
    grid += [dict(QKV_BLOCK_N=16, QKV_SPLIT_K=qs, UP_BLOCK_N=un) for qs in (1, 2) for un in (8, 32)]
    # batches of up to 64 rows through the layer too (tensor-core tiles past WIDE_M), with the wide
    # tiles' K blocks and warps varied: at batch 64 they race cuBLAS, so only measurement picks them
    wide = [dict(MAX_M=64, QKV_WIDE_BLOCK_K=bk, WO_WIDE_BLOCK_K=bk, DOWN_WIDE_BLOCK_K=bk) for bk in (128, 256)]
    wide += [dict(MAX_M=64, QKV_WIDE_WARPS=8, WO_WIDE_WARPS=8, UP_WIDE_WARPS=8, DOWN_WIDE_WARPS=8)]
    wide += [{**w, "SKIP_DEAD": 0, "ATTN_STAGES": 3} for w in wide]
    return [*grid, dict(SKIP_DEAD=0, ATTN_STAGES=3), dict(COUNTERS=0), *wide]


GRIDS = {"rmsnorm": _norm_grid, "add_rmsnorm": _norm_grid, "silu_mul": _silu_grid, "rope": _rope_grid,
         "linear": _gemv_grid,
         "attention": _attention_grid, "sample": _argmax_grid, "mlp_block": _mlp_block_grid,
         "attn_block": _attn_block_grid, "layer": _layer_grid}


def candidates(slots: tuple[str, ...] | None = None) -> list[tuple[str, str, dict[str, str]]]:
    """(slot, module source, params) for every variant in the search grid, distinct sources only."""
    out: list[tuple[str, str, dict[str, str]]] = []
    seen: set[str] = set()
    for slot in slots or tuple(TEMPLATES):
        for point in GRIDS[slot]():
            params = {k: str(v) for k, v in point.items()}
            source = render(slot, params)
            if source not in seen:
                seen.add(source)
                out.append((slot, source, params))
    return out


__all__ = ["GRIDS", "TEMPLATES", "candidates", "defaults", "render", "template"]
