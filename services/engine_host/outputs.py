"""Slot outputs: compare with the reference (per-dtype tolerances, NaN never passes), poison, encode.

Runs inside engine workers. Encoded tensors are plain (shape, dtype name, raw bytes) tuples so the
pipe to the host never pickles torch objects; the host turns them into TensorProto.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

# (atol, rtol) per output dtype: a quick check that rejects wrong kernels, not a proof of equality
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
    torch.float64: (1e-7, 1e-7),
}

EncodedTensor = tuple[tuple[int, ...], str, bytes]


def as_tuple(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def mismatch(reference: Any, candidate: Any) -> str | None:
    """None when the candidate's output matches the reference's; otherwise the reason."""
    refs, outs = as_tuple(reference), as_tuple(candidate)
    if len(refs) != len(outs):
        return f"returned {len(outs)} output(s), the slot returns {len(refs)}"
    for i, (ref, out) in enumerate(zip(refs, outs, strict=True)):
        where = f"output {i}" if len(refs) > 1 else "output"
        if not isinstance(out, Tensor):
            return f"{where} is a {type(out).__name__}, not a Tensor"
        if tuple(out.shape) != tuple(ref.shape):
            return f"{where} shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
        if out.dtype != ref.dtype:
            return f"{where} dtype {dtype_name(out.dtype)} != reference {dtype_name(ref.dtype)}"
        if out.device != ref.device:
            return f"{where} on {out.device}, reference on {ref.device}"
        if not ref.is_floating_point():
            if not torch.equal(out, ref):
                bad = int((out != ref).sum())
                return f"{where} differs from the reference at {bad} of {out.numel()} positions"
            continue
        o, r = out.float(), ref.float()
        if not torch.isfinite(o).all():
            return f"{where} contains NaN or Inf"
        atol, rtol = TOLERANCES.get(ref.dtype, (1e-4, 1e-4))
        err = (o - r).abs()
        bad = err > atol + rtol * r.abs()
        if bad.any():
            idx = tuple(int(v) for v in torch.nonzero(bad)[0])
            return (f"{where} differs from the reference: max abs err {float(err.max()):.3g}, "
                    f"{int(bad.sum())} of {out.numel()} values outside atol {atol:g} + rtol {rtol:g}; "
                    f"first at {idx}")
    return None


def errors(reference: Any, candidate: Any) -> tuple[float, float]:
    """(max abs error, max error relative to the reference's max magnitude) over every output."""
    max_abs = rel = 0.0
    for ref, out in zip(as_tuple(reference), as_tuple(candidate), strict=False):
        if isinstance(out, Tensor) and out.shape == ref.shape:
            e = float((out.double() - ref.double()).abs().max()) if ref.numel() else 0.0
            max_abs = max(max_abs, e)
            rel = max(rel, e / max(float(ref.double().abs().max()) if ref.numel() else 0.0, 1e-12))
    return max_abs, rel


def poison_like(reference: Any) -> None:
    """Fill freshly freed memory of the output's size with NaN (or int max) so that a kernel returning
    uninitialised buffers shows garbage instead of the reference's stale result."""
    junk = []
    for ref in as_tuple(reference):
        if isinstance(ref, Tensor):
            fill = float("nan") if ref.is_floating_point() else torch.iinfo(ref.dtype).max
            junk.append(torch.full_like(ref, fill))
    del junk


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def encode(t: Tensor) -> EncodedTensor:
    """Raw little-endian C-order bytes (bfloat16 as its 2-byte pattern)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return tuple(t.shape), dtype_name(t.dtype), flat.view(torch.uint8).numpy().tobytes()


def decode(shape: tuple[int, ...], dtype: str, data: bytes) -> Tensor:
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(getattr(torch, dtype)).reshape(shape)


def encode_output(out: Any) -> EncodedTensor:
    """One tensor per slot output; a multi-output slot (add_rmsnorm) is stacked on a new leading dim
    [n_outputs, ...], so reference and candidate compare element by element without special cases."""
    outs = as_tuple(out)
    for t in outs:
        if not isinstance(t, Tensor):
            raise TypeError(f"output is a {type(t).__name__}, not a Tensor")
    if len(outs) == 1:
        return encode(outs[0])
    if len({(tuple(t.shape), t.dtype, t.device) for t in outs}) != 1:
        raise TypeError("outputs differ in shape, dtype or device: " +
                        ", ".join(f"{tuple(t.shape)} {dtype_name(t.dtype)}" for t in outs))
    return encode(torch.stack(outs))


def same_tensors(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Bitwise equality of every tensor argument (NaN-safe: compares the raw bytes)."""
    for x, y in zip(a, b, strict=True):
        if isinstance(x, Tensor) and (x.shape != y.shape or not torch.equal(
                x.contiguous().reshape(-1).view(torch.uint8), y.contiguous().reshape(-1).view(torch.uint8))):
            return False
    return True
