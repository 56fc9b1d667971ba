"""Regions: a fused candidate replaces a whole block of the model, not one slot.

`attn_block` is an Attention module, `mlp_block` a FeedForward, `layer` a TransformerBlock and
`step` the whole Transformer forward. A region kernel is called as `kernel(module, *args)` with the
module's own forward arguments (so it reads the module's weights and KV cache) and must return what
the module's forward returns. Installing one binds it as that module type's forward on every
instance of the model; each install bumps the region's version so the CUDA graphs that ran the
region (see cuda_graphs.py) are re-captured and no others.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from services.common.slot_specs import REGIONS
from services.engine_host.models.llama import Attention, FeedForward, Transformer, TransformerBlock

REGION_MODULES: dict[str, type[nn.Module]] = {
    "attn_block": Attention, "mlp_block": FeedForward, "layer": TransformerBlock, "step": Transformer,
}
assert set(REGION_MODULES) == set(REGIONS)

REFERENCE_ID = "reference"


class RegionTable:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.versions: dict[str, int] = dict.fromkeys(REGIONS, 0)
        self.installed: dict[str, str] = dict.fromkeys(REGIONS, REFERENCE_ID)
        self.kernels: dict[str, Callable[..., Any] | None] = dict.fromkeys(REGIONS)  # None: the reference
        self._recording: set[str] | None = None

    def modules(self, region: str) -> list[nn.Module]:
        if region not in REGION_MODULES:
            raise KeyError(f"unknown region {region!r}; known: {', '.join(REGIONS)}")
        kind = REGION_MODULES[region]
        return [m for m in self.model.modules() if type(m) is kind]

    def _bind(self, region: str, kernel: Callable[..., Any] | None) -> None:
        for module in self.modules(region):
            if kernel is None:
                module.__dict__.pop("forward", None)  # back to the class's own forward
                continue
            cls_forward = type(module).forward
            module.forward = types.MethodType(self._wrap(region, kernel, cls_forward), module)

    def _wrap(self, region: str, kernel: Callable[..., Any], _orig: Callable[..., Any]) -> Callable[..., Any]:
        def forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if self._recording is not None:
                self._recording.add(f"region:{region}")
            return kernel(module, *args, **kwargs)

        return forward

    def install(self, region: str, kernel: Callable[..., Any], candidate_id: str) -> str:
        """Replace every module of the region with `kernel`; returns the id it replaced."""
        self.modules(region)  # validates the name
        previous = self.installed[region]
        self._bind(region, kernel)
        self.installed[region], self.kernels[region] = candidate_id, kernel
        self.versions[region] += 1
        return previous

    def rollback(self, region: str) -> str:
        previous = self.installed[region]
        if self.kernels[region] is None:  # already the reference: no version bump, no graph re-capture
            return previous
        self._bind(region, None)
        self.installed[region], self.kernels[region] = REFERENCE_ID, None
        self.versions[region] += 1
        return previous

    def snapshot(self) -> dict[str, tuple[str, Callable[..., Any] | None]]:
        return {r: (self.installed[r], self.kernels[r]) for r in REGIONS}

    def restore(self, snapshot: dict[str, tuple[str, Callable[..., Any] | None]]) -> None:
        for region, (cid, kernel) in snapshot.items():
            if self.installed[region] == cid and self.kernels[region] is kernel:
                continue
            if kernel is None:
                self.rollback(region)
            else:
                self.install(region, kernel, cid)

    @contextmanager
    def recording(self, used: set[str]) -> Iterator[None]:
        """Note every replaced region a forward pass runs through (the reference ones need no note:
        their slots are recorded by the slot table)."""
        self._recording = used
        try:
            yield
        finally:
            self._recording = None
