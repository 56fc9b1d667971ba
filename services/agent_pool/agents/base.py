"""What an agent sees (a slot's context) and what it hands back (proposals and board notes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool.library import Config, candidate_id

PENDING = "pending"
OK = "ok"
LOST = "lost"  # no benchmark result arrived in time


@dataclass
class Trial:
    """One candidate a campaign proposed, and what the engine said about it."""

    candidate_id: str
    slot: str
    params: dict[str, str]
    agent: str
    source: str
    parent_id: str = ""
    created_unix: float = 0.0
    published: bool = False
    republished: int = 0  # times proposed again for want of a result (a delivery the bus gave up on)
    status: str = PENDING  # pending, ok, lost, or a BenchStatus name in lower case ("raised", ...)
    speedup: float = 0.0
    reason: str = ""
    result_seq: int = 0  # order of arrival among the campaign's results (plateau counting)

    @property
    def done(self) -> bool:
        return self.status != PENDING

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass
class SlotContext:
    """Everything an agent may use to propose candidates for one slot of one campaign."""

    campaign_id: str
    slot: str
    model: str
    shapes: list[ev.ShapeBucket]
    space: list[Config]  # the library's configurations for this slot (Triton included when enabled)
    trials: list[Trial]  # this campaign's candidates for the slot, oldest first
    notes: list[ev.BoardNote]  # board notes about this slot, from every agent and campaign
    excluded: set[str]  # candidate ids that must not be proposed again (any campaign)
    stamp: Callable[[str], str]  # source -> the source as proposed (provenance header added)
    compile_left: int  # compiled candidates this campaign may still propose
    seed: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    priors: list[ev.Experience] = field(default_factory=list)  # earlier campaigns' winners (registry.experience)
    hardware: str = ""  # the engine's, as engine.discover named it

    def candidate_id(self, source: str) -> str:
        """The id `source` gets once stamped and proposed."""
        return candidate_id(self.slot, self.stamp(source))

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.ok]
        return max(ok, key=lambda t: t.speedup) if ok else None


@dataclass(frozen=True)
class Proposal:
    slot: str
    source: str  # already stamped
    params: dict[str, str]
    agent: str
    parent_id: str = ""


class Agent(Protocol):
    name: str

    async def propose(self, ctx: SlotContext, n: int) -> list[Proposal]:
        """Up to n new candidates for ctx.slot; [] when this agent has nothing left to try."""
        ...

    def notes_for(self, ctx: SlotContext, trial: Trial, improved: bool) -> list[ev.BoardNote]:
        """Board notes worth sharing after `trial` got its result."""
        ...

    def drain_notes(self) -> list[ev.BoardNote]:
        """Notes the agent produced while proposing (rejected ideas, ...), handed over once."""
        ...
