"""Templates for the MLP's arithmetic: `silu_mul` (SwiGLU gate) and `linear` (every projection).

silu_mul choices:
- form: F.silu, x * sigmoid(x), x / (1 + exp(-x)), or 0.5 x (1 + tanh(x / 2));
- acc:  arithmetic in the input dtype, or in float32 with one cast at the end;
- out:  out-of-place expressions, in-place updates of one fresh intermediate, or the final product
        written through `out=` into a buffer of the output dtype (the cast fused into the multiply).
linear choices:
- form: F.linear, matmul with a transposed view, one 2-D mm over flattened rows, einsum, tensordot;
- acc:  the GEMM in the input dtype, or upcast to float32 (on some CPUs faster than bfloat16).
"""

from __future__ import annotations

from services.agent_pool.library.base import Params, Template

_ACTIVATION = {
    "silu": "F.silu(g)",
    "sigmoid": "g * torch.sigmoid(g)",
    "exp": "g / (1 + torch.exp(-g))",
    "tanh": "0.5 * g * (1 + torch.tanh(0.5 * g))",
}

# in-place chains: every update lands on a tensor the first line just allocated
_INPLACE = {
    "silu": ["y = F.silu(g)"],
    "sigmoid": ["y = torch.sigmoid(g)", "y.mul_(g)"],
    "exp": ["y = torch.neg(g)", "y.exp_()", "y.add_(1)", "y.reciprocal_()", "y.mul_(g)"],
    "tanh": ["y = torch.mul(g, 0.5)", "y.tanh_()", "y.add_(1)", "y.mul_(g)", "y.mul_(0.5)"],
}


def _silu_mul_body(p: Params) -> str:
    lines = ["g = gate.float()", "u = up.float()"] if p["acc"] == "float32" else ["g = gate", "u = up"]
    if p["out"] == "inplace":
        lines += [*_INPLACE[p["form"]], "y.mul_(u)", "return y.to(gate.dtype)"]
    elif p["out"] == "out_arg":
        lines.append(f"return torch.mul({_ACTIVATION[p['form']]}, u, out=torch.empty_like(gate))")
    else:
        lines.append(f"return ({_ACTIVATION[p['form']]} * u).to(gate.dtype)")
    return "\n".join(lines)


SILU_MUL = Template(
    slot="silu_mul",
    grid={
        "form": ("silu", "sigmoid", "exp", "tanh"),
        "acc": ("native", "float32"),
        "out": ("fresh", "inplace", "out_arg"),
    },
    body=_silu_mul_body,
    doc="silu(gate) * up.",
)

_GEMM = {
    "functional": "F.linear(a, w)",
    "matmul": "torch.matmul(a, w.t())",
    "mm_2d": "torch.mm(a.reshape(-1, a.shape[-1]), w.t()).view(*a.shape[:-1], w.shape[0])",
    "einsum": 'torch.einsum("...k,nk->...n", a, w)',
    "tensordot": "torch.tensordot(a, w, dims=([a.dim() - 1], [1]))",
}


def _linear_body(p: Params) -> str:
    lines = ["a = x.float()", "w = weight.float()"] if p["acc"] == "float32" else ["a = x", "w = weight"]
    return "\n".join([*lines, f"return {_GEMM[p['form']]}.to(x.dtype)"])


LINEAR = Template(
    slot="linear",
    grid={"form": tuple(_GEMM), "acc": ("native", "float32")},
    body=_linear_body,
    doc="x @ weight^T.",
)
