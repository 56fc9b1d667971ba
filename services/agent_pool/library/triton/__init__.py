"""Triton kernel templates for the search agents: one module per op, variants rendered from launch constants.

Each op file in this folder (rmsnorm.py, add_rmsnorm.py, silu_mul.py) is a complete candidate module.
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
TEMPLATES: dict[str, str] = {slot: f"{slot}.py" for slot in ("rmsnorm", "add_rmsnorm", "silu_mul")}
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


GRIDS = {"rmsnorm": _norm_grid, "add_rmsnorm": _norm_grid, "silu_mul": _silu_grid}


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
