"""Output comparison: TensorProto decoding, per-dtype tolerances, NaN/Inf, shape and dtype rules.

A candidate output passes only when its shape and dtype equal the reference's exactly, every value
is finite, the relative error norm ‖out-ref‖/‖ref‖ is within the dtype's budget and no element is
grossly off (|out-ref| ≤ atol + rtol·|ref|). Integer and bool outputs must match exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from proto.gen.polymorph.v1 import engine_service_pb2 as es


@dataclass(frozen=True)
class Tolerance:
    rel_norm: float  # bound on ‖out-ref‖ / ‖ref‖ (the main check)
    atol: float  # elementwise guard against a few grossly wrong values
    rtol: float


# Honest reorderings of float32 arithmetic land around 1e-6; computing in float16 lands near 3e-4 and
# in bfloat16 near 2e-3, so float32 slots catch both. Low-precision budgets follow their epsilon.
SLOT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-8, 1e-7, 1e-7),
    "float32": Tolerance(1e-4, 1e-3, 1e-3),
    "float16": Tolerance(1e-3, 2e-3, 4e-3),
    "bfloat16": Tolerance(1.6e-2, 2e-2, 3.2e-2),
}
# End to end: per-step logits after every layer has run the candidate (errors compound).
E2E_TOLERANCES: dict[str, float] = {"float64": 1e-6, "float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}
DEFAULT_DTYPE = "float32"

_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
        "float8_e4m3fn", "float8_e5m2",
    )
}


class TensorDecodeError(ValueError):
    pass


def is_empty(t: es.TensorProto) -> bool:
    return not t.dtype and not t.shape and not t.data


def to_tensor(t: es.TensorProto) -> torch.Tensor:
    """Decode raw little-endian C-order bytes into a CPU tensor (bfloat16 by its bit pattern)."""
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        raise TensorDecodeError(f"unknown dtype {t.dtype!r}")
    shape = tuple(int(d) for d in t.shape)
    if any(d < 0 for d in shape):
        raise TensorDecodeError(f"negative dimension in shape {list(shape)}")
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(t.data) != numel * itemsize:
        raise TensorDecodeError(f"{len(t.data)} bytes for shape {list(shape)} of {t.dtype}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(t.data), dtype=dtype).reshape(shape)


def to_proto(t: torch.Tensor) -> es.TensorProto:
    """The inverse of `to_tensor` (used by tests to build replies)."""
    t = t.detach().contiguous().cpu()
    raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
    return es.TensorProto(shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."),
                          data=raw.numpy().tobytes())


@dataclass(frozen=True)
class Comparison:
    passed: bool
    detail: str
    max_abs_err: float = 0.0
    rel_err: float = 0.0


def tolerance_for(dtype: str) -> Tolerance:
    return SLOT_TOLERANCES.get(dtype, SLOT_TOLERANCES[DEFAULT_DTYPE])


def compare_protos(out: es.TensorProto, ref: es.TensorProto) -> Comparison:
    if is_empty(ref):
        return Comparison(False, "the engine returned no reference output")
    if is_empty(out):
        return Comparison(False, "no output (the kernel returned nothing usable)")
    try:
        return compare(to_tensor(out), to_tensor(ref))
    except TensorDecodeError as exc:
        return Comparison(False, f"undecodable output: {exc}")


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance | None = None) -> Comparison:
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype {_name(out.dtype)} != reference {_name(ref.dtype)}")
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
    tol = tol or tolerance_for(_name(ref.dtype))
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


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
