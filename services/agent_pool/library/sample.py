"""Greedy sampling templates: argmax over the vocabulary, lowest index on ties.

Choices: torch.argmax, max(...).indices, the first index equal to the row maximum, or a stable
descending sort; on the logits' own dtype or upcast to float32 (exact, so ties are unchanged).
No compiled variant: a single reduction gains nothing from a graph.
"""

from __future__ import annotations

from services.agent_pool.library.base import Params, Template

_PICK = {
    "argmax": "return z.argmax(dim=-1)",
    "max_indices": "return z.max(dim=-1).indices",
    "first_max": "return (z == z.amax(dim=-1, keepdim=True)).to(torch.uint8).argmax(dim=-1)",
    "stable_sort": "return torch.sort(z, dim=-1, descending=True, stable=True).indices[:, 0].contiguous()",
}


def _body(p: Params) -> str:
    first = "z = logits.float()" if p["acc"] == "float32" else "z = logits"
    return "\n".join([first, _PICK[p["form"]]])


SAMPLE = Template(
    slot="sample",
    grid={"form": tuple(_PICK), "acc": ("native", "float32")},
    body=_body,
    backends=("torch",),
    doc="greedy token ids, lowest index on ties.",
)
