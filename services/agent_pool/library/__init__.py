"""The kernel library: every slot's search space as (params, source) configurations.

Torch templates live in this package (norm, mlp, rope, attention, sample); Triton sources come from
`services.agent_pool.library.triton` (another module's business) and join a slot's space only when
asked to, because Triton runs ~1000x slower in the CPU interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.agent_pool.library.attention import ATTENTION
from services.agent_pool.library.base import Template
from services.agent_pool.library.mlp import LINEAR, SILU_MUL
from services.agent_pool.library.norm import ADD_RMSNORM, RMSNORM
from services.agent_pool.library.rope import ROPE
from services.agent_pool.library.sample import SAMPLE
from services.common.log import get_logger
from services.common.slot_specs import REGIONS, candidate_id

log = get_logger("agent_pool.library")

TEMPLATES: dict[str, Template] = {
    t.slot: t for t in (RMSNORM, ADD_RMSNORM, SILU_MUL, ROPE, ATTENTION, LINEAR, SAMPLE)
}
SLOTS: tuple[str, ...] = tuple(TEMPLATES)


def campaign_ops(triton: bool) -> tuple[str, ...]:
    """What a campaign aims at when it names nothing: every library slot and, where Triton runs, the
    regions that have a Triton template (fused blocks are where a batch-1 step's launches go; on the
    CPU the interpreter makes them minutes a call, and they have no torch formulation to search)."""
    if not triton:
        return SLOTS
    from services.agent_pool.library import triton as triton_library

    return SLOTS + tuple(r for r in REGIONS if r in triton_library.TEMPLATES)


@dataclass(frozen=True)
class Config:
    """One point of a slot's search space: the parameters and the module they render to."""

    slot: str
    params: tuple[tuple[str, str], ...]  # sorted items, hashable
    source: str

    @property
    def param_dict(self) -> dict[str, str]:
        return dict(self.params)

    @property
    def backend(self) -> str:
        return self.param_dict.get("backend", "torch")


def _config(slot: str, params: dict[str, str], source: str) -> Config:
    return Config(slot, tuple(sorted(params.items())), source)


def render(slot: str, params: dict[str, str]) -> str:
    return TEMPLATES[slot].render(params)


def triton_configs(slots: tuple[str, ...]) -> list[Config]:
    """Triton candidates for these slots; an absent or broken Triton module contributes nothing."""
    try:
        from services.agent_pool.library import triton as triton_library

        items = triton_library.candidates()
    except Exception as exc:  # the module is optional and owned elsewhere: never fatal here
        log.warning("triton candidates unavailable", error=f"{type(exc).__name__}: {exc}")
        return []
    return [
        _config(slot, {**params, "backend": "triton"}, source)
        for slot, source, params in items
        if slot in slots
    ]


def space(slot: str, *, triton: bool = False) -> list[Config]:
    """Every distinct configuration of a slot (torch and compile templates, Triton when asked)."""
    configs: list[Config] = []
    if slot in TEMPLATES:
        template = TEMPLATES[slot]
        configs = [_config(slot, p, template.render(p)) for p in template.configs()]
    if triton:
        configs += triton_configs((slot,))
    seen: set[str] = set()
    distinct = []
    for config in configs:
        if config.source not in seen:
            seen.add(config.source)
            distinct.append(config)
    return distinct


def reference_source(slot: str) -> str:
    """The plainest torch rendering of a slot (first value of every choice): a readable reference."""
    return TEMPLATES[slot].render({})


__all__ = ["SLOTS", "TEMPLATES", "Config", "campaign_ops", "candidate_id", "reference_source", "render", "space"]
