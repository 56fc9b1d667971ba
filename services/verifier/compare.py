"""TensorProto in and out of torch, and the verifier's verdict on one output.

The rule itself (shape and dtype equal, every value finite, relative error norm within the dtype's
budget, no gross outlier; integers exact) and its one tolerance table live in services.common.tensors,
shared with the engine harness's own checks of timed calls.
"""

from __future__ import annotations

import torch

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from services.common.tensors import (
    DEFAULT_DTYPE,
    TOLERANCES,
    Comparison,
    TensorDecodeError,
    compare,
    decode,
    dtype_name,
    tolerance_for,
)

__all__ = ["DEFAULT_DTYPE", "E2E_TOLERANCES", "TOLERANCES", "Comparison", "TensorDecodeError", "compare",
           "compare_protos", "is_empty", "to_proto", "to_tensor", "tolerance_for"]

# End to end: per-step logits after every layer has run the candidate (errors compound). Set from the
# measured error of honest rewrites (benchmarks/e2e_tolerance.py: worst 7e-7 in float32 on llama-tiny),
# with room for compounding; low-precision budgets are not measured yet and follow their epsilon.
E2E_TOLERANCES: dict[str, float] = {"float64": 1e-9, "float32": 2e-5, "float16": 1e-2, "bfloat16": 5e-2}


def is_empty(t: es.TensorProto) -> bool:
    return not t.dtype and not t.shape and not t.data


def to_tensor(t: es.TensorProto) -> torch.Tensor:
    """Decode raw little-endian C-order bytes into a CPU tensor (bfloat16 by its bit pattern)."""
    return decode(tuple(t.shape), t.dtype, t.data)


def to_proto(t: torch.Tensor) -> es.TensorProto:
    """The inverse of `to_tensor` (used by tests to build replies)."""
    t = t.detach().contiguous().cpu()
    raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
    return es.TensorProto(shape=list(t.shape), dtype=dtype_name(t.dtype), data=raw.numpy().tobytes())


def compare_protos(out: es.TensorProto, ref: es.TensorProto) -> Comparison:
    if is_empty(ref):
        return Comparison(False, "the engine returned no reference output")
    if is_empty(out):
        return Comparison(False, "no output (the kernel returned nothing usable)")
    try:
        return compare(to_tensor(out), to_tensor(ref))
    except TensorDecodeError as exc:
        return Comparison(False, f"undecodable output: {exc}")
