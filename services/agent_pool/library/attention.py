"""Attention templates: softmax(q k^T / sqrt(D)) v with grouped-query heads and a boolean mask.

Choices:
- form:    SDPA with enable_gqa (no KV copy), SDPA on K/V repeated with repeat_interleave, SDPA on
           K/V expanded then reshaped, explicit matmul-softmax on repeated K/V, or explicit
           matmul-softmax with the query heads folded into groups (no KV copy);
- mask:    the boolean mask as given, or converted to an additive float bias;
- kernel:  (SDPA forms) let SDPA choose its backend, or force the math backend;
- softmax: (explicit forms) softmax in float32, or in the input dtype;
- scale:   (explicit forms) scale q before the matmul, or the scores after it.
"""

from __future__ import annotations

from services.agent_pool.library.base import Params, Template

_SDPA = ("sdpa_gqa", "sdpa_repeat", "sdpa_expand")
_KV = {
    "sdpa_gqa": [],
    "sdpa_repeat": ["k = k.repeat_interleave(g, dim=1)", "v = v.repeat_interleave(g, dim=1)"],
    "sdpa_expand": [
        "k = k[:, :, None].expand(b, hkv, g, t, d).reshape(b, hkv * g, t, d)",
        "v = v[:, :, None].expand(b, hkv, g, t, d).reshape(b, hkv * g, t, d)",
    ],
}

GRID = {
    "form": (*_SDPA, "matmul_repeat", "matmul_grouped"),
    "mask": ("bool", "additive"),
    "kernel": ("auto", "math"),
    "softmax": ("float32", "native"),
    "scale": ("scores", "query"),
}


def _valid(p: Params) -> bool:
    if p["form"] in _SDPA:  # SDPA scales and softmaxes internally
        return p["softmax"] == "float32" and p["scale"] == "scores"
    return p["kernel"] == "auto"


def _mask_lines(p: Params) -> list[str]:
    if p["mask"] == "additive":
        return ["bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float('-inf'))"]
    return []


def _sdpa(p: Params) -> list[str]:
    gqa = ", enable_gqa=True" if p["form"] == "sdpa_gqa" else ""
    m = "bias" if p["mask"] == "additive" else "mask"
    call = f"F.scaled_dot_product_attention(q, k, v, attn_mask={m}{gqa})"
    lines = [*_KV[p["form"]], *_mask_lines(p)]
    if p["kernel"] == "math":
        lines += [
            "from torch.nn.attention import SDPBackend, sdpa_kernel",
            "",
            "with sdpa_kernel([SDPBackend.MATH]):",
            f"    return {call}",
        ]
    else:
        lines.append(f"return {call}")
    return lines


def _explicit(p: Params) -> list[str]:
    lines = _mask_lines(p)
    grouped = p["form"] == "matmul_grouped"
    if grouped:  # query head h uses kv head h // g: fold the g query heads of a group into rows
        lines.append("qq = q.reshape(b, hkv, g * s, d)")
        kk, vv = "k", "v"
    else:
        lines += ["kk = k.repeat_interleave(g, dim=1)", "vv = v.repeat_interleave(g, dim=1)", "qq = q"]
        kk, vv = "kk", "vv"
    if p["scale"] == "query":
        lines.append(f"scores = torch.matmul(qq * (1.0 / math.sqrt(d)), {kk}.transpose(-1, -2))")
    else:
        lines.append(f"scores = torch.matmul(qq, {kk}.transpose(-1, -2)) * (1.0 / math.sqrt(d))")
    if grouped:
        lines.append("scores = scores.view(b, hkv, g, s, t)")
    m = "bias" if p["mask"] == "additive" else "mask"
    if grouped:
        m += ".unsqueeze(2)"
    if p["mask"] == "additive":
        lines.append(f"scores = scores + {m}")
    else:
        lines.append(f"scores = scores.masked_fill(~{m}, float('-inf'))")
    if p["softmax"] == "float32":
        lines.append("probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)")
    else:
        lines.append("probs = torch.softmax(scores, dim=-1)")
    if grouped:
        lines.append(f"return torch.matmul(probs.view(b, hkv, g * s, t), {vv}).view(b, hkv * g, s, d)")
    else:
        lines.append(f"return torch.matmul(probs, {vv})")
    return lines


def _body(p: Params) -> str:
    head = ["b, hq, s, d = q.shape", "hkv, t = k.shape[1], k.shape[2]", "g = hq // hkv"]
    rest = _sdpa(p) if p["form"] in _SDPA else _explicit(p)
    return "\n".join(head + rest)


ATTENTION = Template(
    slot="attention", grid=GRID, body=_body, valid=_valid,
    doc="softmax(q k^T / sqrt(D)) v, grouped-query heads, boolean mask (True = attend).",
)
