"""Parameterised templates: a grid of named choices per slot, rendered into complete candidate modules.

A template renders the *body* of the slot's function from one point of its grid; `render` wraps it
into a module with SLOT, BACKEND and `kernel(...)` with the exact signature of
`services.common.slot_specs`. The backend is one more grid axis: "torch" defines `kernel` directly,
"compile" defines `_impl` and binds `kernel = torch.compile(_impl, dynamic=True)` (compiled lazily on
the first call, in the engine worker). Rendering is plain text: nothing here imports torch.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from services.common.slot_specs import SLOTS

Params = Mapping[str, str]



@dataclass(frozen=True)
class Template:
    slot: str
    grid: Mapping[str, tuple[str, ...]]  # choice -> values; the backend axis is added by `configs`
    body: Callable[[Params], str]  # the function body (unindented), returns the slot's result
    valid: Callable[[Params], bool] = field(default=lambda p: True)
    backends: tuple[str, ...] = ("torch", "compile")
    doc: str = ""

    def configs(self) -> list[dict[str, str]]:
        """Every valid point of the grid, backend included, in a stable order."""
        names = list(self.grid)
        points: list[dict[str, str]] = []
        for backend in self.backends:
            for values in itertools.product(*(self.grid[n] for n in names)):
                params = dict(zip(names, values, strict=True))
                if self.valid(params):
                    points.append({**params, "backend": backend})
        return points

    def render(self, params: Params) -> str:
        unknown = set(params) - set(self.grid) - {"backend"}
        if unknown:
            raise ValueError(f"{self.slot}: unknown template parameters {sorted(unknown)}")
        backend = params.get("backend", "torch")
        if backend not in self.backends:
            raise ValueError(f"{self.slot}: backend {backend!r} not in {self.backends}")
        choice = {n: params.get(n, vals[0]) for n, vals in self.grid.items()}
        for name, value in choice.items():
            if value not in self.grid[name]:
                raise ValueError(f"{self.slot}: {name}={value!r} not in {self.grid[name]}")
        if not self.valid(choice):
            raise ValueError(f"{self.slot}: invalid combination {choice}")
        return _module(self.slot, backend, choice, self.body(choice), self.doc)


def _module(slot: str, backend: str, choice: Params, body: str, doc: str) -> str:
    args = ", ".join(SLOTS[slot].params)
    described = " ".join(f"{k}={v}" for k, v in choice.items())
    fn = "_impl" if backend == "compile" else "kernel"
    lines = [
        f'"""Polymorph kernel library: {slot}. {doc}"""',
        f"# params: {described} backend={backend}",
        "import math",
        "",
        "import torch",
        "import torch.nn.functional as F",
        "",
        f'SLOT = "{slot}"',
        f'BACKEND = "{backend}"',
        "",
        "",
        f"def {fn}({args}):",
        textwrap.indent(textwrap.dedent(body).strip("\n"), "    "),
    ]
    if backend == "compile":
        # dynamic=True: one graph serves every batch / context length the engine times
        lines += ["", "", "kernel = torch.compile(_impl, dynamic=True)"]
    return "\n".join(lines) + "\n"

