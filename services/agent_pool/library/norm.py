"""RMSNorm templates: `rmsnorm` and the fused residual-add variant `add_rmsnorm`.

Choices (every combination computes x * rsqrt(mean(x^2) + eps) * weight):
- form:   how the mean square is taken: x.pow(2).mean, (x*x).mean, an einsum dot product,
          torch.linalg.vector_norm squared, or torch.nn.functional.rms_norm as a whole;
- acc:    arithmetic in float32, or in the input's own dtype (reductions still accumulate wider);
- scale:  multiply by rsqrt, or divide by sqrt;
- weight: cast back first then multiply by the weight (gpt-fast order), or fuse the weight into the
          float32 product and cast once;
- out:    out-of-place expressions, or in-place updates of one fresh buffer (inputs never mutated);
- add:    (add_rmsnorm only) the residual sum in the input dtype, or in float32 and normalised
          before rounding.
"""

from __future__ import annotations

from services.agent_pool.library.base import Params, Template

_MEAN_SQUARE = {
    "pow_mean": "ms = xf.pow(2).mean(-1, keepdim=True)",
    "mul_mean": "ms = (xf * xf).mean(-1, keepdim=True)",
    "einsum": 'ms = torch.einsum("...e,...e->...", xf, xf).unsqueeze(-1) / xf.shape[-1]',
    "vector_norm": "ms = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square() / xf.shape[-1]",
}

GRID = {
    "form": ("pow_mean", "mul_mean", "einsum", "vector_norm", "functional"),
    "acc": ("float32", "native"),
    "scale": ("rsqrt", "div_sqrt"),
    "weight": ("after_cast", "fused"),
    "out": ("fresh", "inplace"),
}


def _valid(p: Params) -> bool:
    # rms_norm does its own scaling and allocation: only the canonical choice of those axes
    return p["form"] != "functional" or (p["scale"] == "rsqrt" and p["out"] == "fresh")


def norm_lines(p: Params, src: str, f32: str | None = None, f32_owned: bool = False) -> list[str]:
    """Lines leaving the normalised `src` (times weight) in `y`, in src's dtype.

    f32 names a float32 tensor holding src's values, if one exists; f32_owned says it may be
    modified in place (it is not an input and not returned).
    """
    inplace = p["out"] == "inplace"
    if p["acc"] == "float32":
        if f32 is not None and (f32_owned or not inplace):
            lines = [f"xf = {f32}"]
        elif inplace:
            lines = [f"xf = {src}.to(torch.float32, copy=True)  # a fresh buffer we may update"]
        else:
            lines = [f"xf = {src}.float()"]
    else:
        lines = [f"xf = {src}.clone()  # a fresh buffer we may update" if inplace else f"xf = {src}"]
    dtype = f"{src}.dtype"
    if p["form"] == "functional":
        if p["weight"] == "fused":
            lines.append(f"y = F.rms_norm(xf, (xf.shape[-1],), weight=weight.to(xf.dtype), eps=eps).to({dtype})")
        else:
            lines.append(f"y = F.rms_norm(xf, (xf.shape[-1],), eps=eps).to({dtype}) * weight.to({dtype})")
        return lines
    lines.append(_MEAN_SQUARE[p["form"]])
    rsqrt = p["scale"] == "rsqrt"
    factor = "torch.rsqrt(ms + eps)" if rsqrt else "torch.sqrt(ms + eps)"
    if inplace:
        lines.append(f"xf.{'mul_' if rsqrt else 'div_'}({factor})")
        if p["weight"] == "fused":
            lines += ["xf.mul_(weight)", f"y = xf.to({dtype})"]
        else:
            lines += [f"y = xf.to({dtype})", "y.mul_(weight)"]
        return lines
    op = "*" if rsqrt else "/"
    if p["weight"] == "fused":
        lines.append(f"y = (xf {op} {factor} * weight.to(xf.dtype)).to({dtype})")
    else:
        lines.append(f"y = (xf {op} {factor}).to({dtype}) * weight.to({dtype})")
    return lines


def _rmsnorm_body(p: Params) -> str:
    return "\n".join([*norm_lines(p, "x"), "return y"])


def _add_rmsnorm_body(p: Params) -> str:
    if p["add"] == "float32":
        # normalise the unrounded float32 sum; the returned residual stream is its own copy
        lines = [
            "hf = x.float() + residual.float()",
            "h = hf.to(x.dtype, copy=True)",
            *norm_lines(p, "h", f32="hf", f32_owned=True),
        ]
    else:
        lines = ["h = x + residual", *norm_lines(p, "h")]
    return "\n".join([*lines, "return y, h"])


RMSNORM = Template(
    slot="rmsnorm", grid=GRID, body=_rmsnorm_body, valid=_valid,
    doc="x * rsqrt(mean(x^2) + eps) * weight.",
)
ADD_RMSNORM = Template(
    slot="add_rmsnorm", grid={**GRID, "add": ("native", "float32")}, body=_add_rmsnorm_body, valid=_valid,
    doc="h = x + residual; (rmsnorm(h), h).",
)
