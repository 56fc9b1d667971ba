"""The LLM agent's prompt, and the checks a reply must pass before it becomes a candidate."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool.agents.base import SlotContext
from services.agent_pool.library import reference_source
from services.common.slot_specs import BACKENDS, SLOTS

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

ALLOWED_IMPORTS = {"torch", "math", "triton", "typing", "functools", "__future__"}
MAX_NOTES = 12
MAX_FEEDBACK = 12

SYSTEM = (
    "You write fast, exactly correct PyTorch kernels for Polymorph, which hot-swaps them into a live "
    "LLM forward pass and times them against the incumbent. Reply with exactly one ```python code "
    "block holding a complete module: SLOT = \"<slot>\", BACKEND = \"torch\" or \"compile\" (or "
    "\"triton\" on GPU engines), and def kernel(...) with the exact parameter names given. Never modify "
    "an input tensor, return fresh tensors in the input dtype, stay correct at any shape, and import "
    "nothing but torch and math."
)


class InvalidProposal(ValueError):
    """The model's reply is not a usable candidate module (the message says why)."""


def _shape_line(b: ev.ShapeBucket) -> str:
    phase = ev.Phase.Name(b.phase).removeprefix("PHASE_").lower()
    return f"- {phase}: batch {b.batch_size}, context {b.context_len}, weight {b.weight:.2f}"


def build_messages(ctx: SlotContext, rejections: list[str]) -> list[ChatCompletionMessageParam]:
    spec = SLOTS[ctx.slot]
    best = ctx.best
    incumbent = (
        f"The best candidate so far in this campaign is {best.speedup:.3f}x the engine's incumbent:\n"
        f"```python\n{best.source}```"
        if best
        else "Nothing has beaten the engine's incumbent yet; it computes what the reference does."
    )
    shapes = "\n".join(_shape_line(b) for b in ctx.shapes) or "- the engine's default shapes"
    notes = [n for n in ctx.notes if n.slot == ctx.slot][-MAX_NOTES:]
    done = [t for t in ctx.trials if t.done][-MAX_FEEDBACK:]
    feedback = [
        f"- {t.agent} {' '.join(f'{k}={v}' for k, v in sorted(t.params.items()))}: "
        + (f"{t.speedup:.3f}x" if t.ok else f"{t.status}: {t.reason[:200]}")
        for t in done
    ]
    feedback += [f"- your earlier reply was rejected: {r}" for r in rejections[-4:]]
    user = "\n\n".join(
        [
            f"Slot: {ctx.slot} (model {ctx.model})",
            f"Signature: kernel({', '.join(spec.params)})\nContract: {spec.doc}",
            "A plain torch implementation of the contract (the engine's reference computes the same "
            f"function):\n```python\n{reference_source(ctx.slot)}```",
            incumbent,
            f"Traffic shapes the engine benchmarks at (weights = share of traffic):\n{shapes}",
            "Board notes from other agents:\n" + ("\n".join(f"- [{n.agent}] {n.text}" for n in notes) or "- none"),
            "Feedback on earlier attempts:\n" + ("\n".join(feedback) or "- none yet"),
            "Propose one new variant that you expect to be faster than the incumbent at these shapes. "
            "Reply with the complete module in one ```python block.",
        ]
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_module(reply: str, slot: str) -> str:
    """The candidate module in a reply, checked; raises InvalidProposal with the reason."""
    blocks = _FENCE.findall(reply) or [reply]
    errors = []
    for block in blocks:
        try:
            return validate(block.strip() + "\n", slot)
        except InvalidProposal as exc:
            errors.append(str(exc))
    raise InvalidProposal("; ".join(errors) if errors else "no code block in the reply")


def _string_assign(tree: ast.Module, name: str) -> str | None:
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def backend_of(source: str) -> str:
    """The BACKEND a validated module declares."""
    return _string_assign(ast.parse(source), "BACKEND") or "torch"


def validate(source: str, slot: str) -> str:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise InvalidProposal(f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    found = _string_assign(tree, "SLOT")
    if found != slot:
        raise InvalidProposal(f"SLOT must be {slot!r}, found {found!r}")
    backend = _string_assign(tree, "BACKEND")
    if backend not in BACKENDS:
        raise InvalidProposal(f"BACKEND must be one of {BACKENDS}, found {backend!r}")
    params = list(SLOTS[slot].params)
    kernel_defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel"]
    kernel_assigned = any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "kernel" for t in n.targets)
        for n in tree.body
    )
    if kernel_defs:
        args = [a.arg for a in kernel_defs[-1].args.args]
        if args != params:
            raise InvalidProposal(f"kernel must take ({', '.join(params)}), found ({', '.join(args)})")
    elif not kernel_assigned:
        raise InvalidProposal("no module-level kernel")
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        for name in names:
            if name.split(".")[0] not in ALLOWED_IMPORTS:
                raise InvalidProposal(f"import of {name!r} is not allowed")
    return source
