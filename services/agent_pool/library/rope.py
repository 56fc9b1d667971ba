"""Rotary embedding templates: rotate interleaved pairs (x[..., 2i], x[..., 2i+1]) by (cos, sin).

Choices:
- layout: gpt-fast's stacked pairs (reshape to [..., D/2, 2] and stack the rotated halves), a
          complex multiply (view_as_complex), split strided halves written into one fresh output,
          the rotate-half form with cos/sin repeated per element, or a batch of 2x2 rotation matmuls;
- acc:    float32 arithmetic, or cos/sin cast to the input dtype (the complex layout needs float32).
"""

from __future__ import annotations

from services.agent_pool.library.base import Params, Template

_CS = "cos, sin = freqs_cis[..., 0].view(1, s, 1, -1), freqs_cis[..., 1].view(1, s, 1, -1)"

_LAYOUT = {
    "stacked": [
        "xs = xf.reshape(*x.shape[:-1], -1, 2)",
        "fc = freqs_cis.view(1, s, 1, -1, 2).to(xf.dtype)",
        "out = torch.stack(",
        "    [xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1], xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]],",
        "    dim=-1,",
        ")",
        "return out.flatten(3).to(x.dtype)",
    ],
    "complex": [
        "xc = torch.view_as_complex(xf.reshape(*x.shape[:-1], -1, 2).contiguous())",
        "fc = torch.view_as_complex(freqs_cis.float().contiguous()).view(1, s, 1, -1)",
        "return torch.view_as_real(xc * fc).flatten(3).to(x.dtype)",
    ],
    "split": [
        _CS,
        "cos, sin = cos.to(xf.dtype), sin.to(xf.dtype)",
        "x0, x1 = xf[..., 0::2], xf[..., 1::2]",
        "out = torch.empty(x.shape, dtype=x.dtype, device=x.device)",
        "out[..., 0::2] = x0 * cos - x1 * sin",
        "out[..., 1::2] = x1 * cos + x0 * sin",
        "return out",
    ],
    "rotate": [
        _CS,
        "cos = cos.repeat_interleave(2, dim=-1).to(xf.dtype)",
        "sin = sin.repeat_interleave(2, dim=-1).to(xf.dtype)",
        "rot = torch.stack((-xf[..., 1::2], xf[..., 0::2]), dim=-1).flatten(-2)",
        "return (xf * cos + rot * sin).to(x.dtype)",
    ],
    "matmul": [
        _CS,
        "# [x0, x1] @ [[cos, sin], [-sin, cos]] = [x0 cos - x1 sin, x0 sin + x1 cos]",
        "rot = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2).to(xf.dtype)",
        "xs = xf.reshape(*x.shape[:-1], -1, 1, 2)",
        "return torch.matmul(xs, rot).flatten(3).to(x.dtype)",
    ],
}


def _body(p: Params) -> str:
    first = "xf = x.float()" if p["acc"] == "float32" else "xf = x"
    return "\n".join([first, "s = x.shape[1]", *_LAYOUT[p["layout"]]])


ROPE = Template(
    slot="rope",
    grid={"layout": tuple(_LAYOUT), "acc": ("float32", "native")},
    body=_body,
    valid=lambda p: not (p["layout"] == "complex" and p["acc"] == "native"),
    doc="interleaved-pair rotary embedding (gpt-fast convention).",
)
