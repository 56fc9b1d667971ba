"""Tensors across process boundaries and the one rule that judges an output against its reference.

Used by the engine harness (its quick checks of timed calls) and by the verifier (its stages), so both
judge with the same tolerance table. Imports torch: only torch-using services import this module.

Encoded tensors are (shape, dtype name, raw little-endian C-order bytes; bfloat16 as its bit pattern).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

EncodedTensor = tuple[tuple[int, ...], str, bytes]


@dataclass(frozen=True)
class Tolerance:
    rel_norm: float  # bound on ‖out-ref‖ / ‖ref‖ (the main check)
    atol: float  # elementwise guard against a few grossly wrong values
    rtol: float


# Honest reorderings of float32 arithmetic land around 1e-6; computing in float16 lands near 3e-4 and
# in bfloat16 near 2e-3, so float32 slots catch both. Low-precision budgets follow their epsilon.
TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-8, 1e-7, 1e-7),
    "float32": Tolerance(1e-4, 1e-3, 1e-3),
    "float16": Tolerance(1e-3, 2e-3, 4e-3),
    "bfloat16": Tolerance(1.6e-2, 2e-2, 3.2e-2),
}
DEFAULT_DTYPE = "float32"

DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
        "float8_e4m3fn", "float8_e5m2",
    )
}


class TensorDecodeError(ValueError):
    pass


@dataclass(frozen=True)
class Comparison:
    passed: bool
    detail: str
    max_abs_err: float = 0.0
    rel_err: float = 0.0


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tolerance_for(dtype: str) -> Tolerance:
    return TOLERANCES.get(dtype, TOLERANCES[DEFAULT_DTYPE])


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance | None = None) -> Comparison:
    """Shape and dtype equal, every value finite, ‖out-ref‖/‖ref‖ within budget, no gross outlier;
    integer and bool outputs equal exactly."""
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype {dtype_name(out.dtype)} != reference {dtype_name(ref.dtype)}")
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, f"shape {list(out.shape)} != reference {list(ref.shape)}")
    if not (out.is_floating_point() or out.is_complex()):
        wrong = int((out != ref).sum())
        detail = f"{wrong} of {out.numel()} values differ" if wrong else "exact match"
        return Comparison(wrong == 0, detail, float(wrong > 0), float(wrong) / max(out.numel(), 1))
    o, r = out.double(), ref.double()
    bad = int((~torch.isfinite(o)).sum())
    if bad:
        return Comparison(False, f"{bad} NaN/Inf values in the output", math.inf, math.inf)
    if not bool(torch.isfinite(r).all()):
        return Comparison(False, "the reference output is not finite: inputs cannot verify this kernel")
    tol = tol or tolerance_for(dtype_name(ref.dtype))
    diff = (o - r).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    ref_norm = float(torch.linalg.vector_norm(r)) if r.numel() else 0.0
    err_norm = float(torch.linalg.vector_norm(o - r)) if r.numel() else 0.0
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)
    gross = int((diff > tol.atol + tol.rtol * r.abs()).sum())
    stats = f"max_abs_err {max_abs:.3g}, rel_err {rel:.3g}"
    if rel > tol.rel_norm:
        return Comparison(False, f"{stats} > tolerance {tol.rel_norm:g}", max_abs, rel)
    if gross:
        return Comparison(False, f"{stats}; {gross} values beyond atol {tol.atol:g} + rtol {tol.rtol:g}",
                          max_abs, rel)
    return Comparison(True, stats, max_abs, rel)


def compare_all(outs: tuple[torch.Tensor, ...], refs: tuple[torch.Tensor, ...]) -> Comparison:
    """Every output of a multi-output op against its reference; the worst errors, the first failure."""
    if len(outs) != len(refs):
        return Comparison(False, f"returned {len(outs)} output(s), the op returns {len(refs)}")
    worst_abs = worst_rel = 0.0
    for i, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        result = compare(out, ref)
        worst_abs, worst_rel = max(worst_abs, result.max_abs_err), max(worst_rel, result.rel_err)
        if not result.passed:
            where = f"output {i}: " if len(refs) > 1 else ""
            return Comparison(False, where + result.detail, worst_abs, worst_rel)
    return Comparison(True, f"max_abs_err {worst_abs:.3g}, rel_err {worst_rel:.3g}", worst_abs, worst_rel)


def encode(t: torch.Tensor) -> EncodedTensor:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return tuple(t.shape), dtype_name(t.dtype), flat.view(torch.uint8).numpy().tobytes()


def decode(shape: tuple[int, ...] | list[int], dtype: str, data: bytes) -> torch.Tensor:
    """The inverse of `encode`; TensorDecodeError for an unknown dtype or a size mismatch."""
    torch_dtype = DTYPES.get(dtype)
    if torch_dtype is None:
        raise TensorDecodeError(f"unknown dtype {dtype!r}")
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise TensorDecodeError(f"negative dimension in shape {list(dims)}")
    numel = math.prod(dims)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    if len(data) != numel * itemsize:
        raise TensorDecodeError(f"{len(data)} bytes for shape {list(dims)} of {dtype}")
    if numel == 0:
        return torch.empty(dims, dtype=torch_dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(torch_dtype).reshape(dims)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe: compares raw bytes)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
