"""Where a campaign spends its budget: the live step's time per slot and region, measured first.

Before its first proposal a campaign asks the slow-tier engine (the whole model, CUDA graphs where it
has them) to profile the step at the campaign's shapes. A slot's share is its time per step over the
step's time, weighted over the shapes; a region's share is its whole forward, slots inside included,
because a region candidate can replace all of it. Its headroom is the part of that time above its
memory floor (the bytes its calls move over the engine's copy bandwidth: for a region its weights
once, its activations and the live K/V). Proposals then go to the active slot with the fewest candidates per
unit of headroom (a slot with twice the time at stake gets twice the candidates, the
biggest first), and plateau still stops a slot early. A slot the profile does not name (the step does
not call it at these shapes) gets the least share. If no profile can be taken the budget is shared
evenly, as before, and the campaign says why.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import grpc

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import engine_service_pb2_grpc as es_grpc
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.common.grpc_server import channel

MIN_SHARE = 0.02  # every slot the step calls gets some candidates: a profile is a guide, not a verdict


class NoProfile(Exception):
    """The step could not be profiled (no engine, an engine error): the budget is shared evenly."""


async def profile_step(bus: Bus, model: str, shapes: Sequence[ev.ShapeBucket], timeout_s: float) -> es.ProfileReply:
    """The slow-tier engine's per-slot profile of `model`'s step at `shapes` (empty: its defaults)."""
    try:
        engine = await bus.request(subjects.ENGINE_DISCOVER, ev.DiscoverRequest(model=model, tier="slow"),
                                   ev.EngineAddress, timeout_s=min(timeout_s, 10.0))
    except Exception as exc:
        raise NoProfile(f"no slow-tier engine for {model!r} answered engine.discover ({type(exc).__name__})") from exc
    if engine.error or not engine.address:
        raise NoProfile(f"engine.discover: {engine.error or 'empty address'}")
    async with channel(engine.address) as chan:
        try:
            return await es_grpc.EngineServiceStub(chan).Profile(
                es.ProfileRequest(shapes=list(shapes), tier=es.TIER_SLOW), timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:  # its str() is a multi-line debug dump
            raise NoProfile(f"profile failed: {exc.code().name}: {exc.details()}"[:500]) from exc
        except Exception as exc:
            raise NoProfile(f"profile failed: {type(exc).__name__}: {exc}"[:500]) from exc


def step_shares(reply: es.ProfileReply, slots: Sequence[str]) -> list[ev.SlotShare]:
    """Each campaign slot's share of the step, largest first (ties in campaign order)."""
    weight_of: dict[str, float] = {}
    us: dict[str, float] = defaultdict(float)
    floor: dict[str, float] = defaultdict(float)
    for t in reply.times:
        weight_of[t.shape.SerializeToString()] = t.shape.weight or 1.0
    total_weight = sum(weight_of.values()) or 1.0
    for t in reply.times:
        us[t.slot] += t.median_us * (t.shape.weight or 1.0) / total_weight
        floor[t.slot] += min(t.floor_us, t.median_us) * (t.shape.weight or 1.0) / total_weight
    step_us = reply.step_us or max(us.values(), default=0.0)

    def fraction(x: float) -> float:
        return min(x / step_us, 1.0) if step_us > 0 else 0.0

    shares = [ev.SlotShare(slot=s, share=fraction(us[s]), us_per_step=us[s], floor_us=floor[s],
                           headroom=fraction(us[s] - floor[s])) for s in slots if s in us]
    order = {s: i for i, s in enumerate(slots)}
    return sorted(shares, key=lambda s: (-s.headroom, order[s.slot]))


def weights(shares: Sequence[ev.SlotShare], slots: Sequence[str]) -> dict[str, float]:
    """Budget weight per slot: its share, at least MIN_SHARE (also for a slot the profile does not
    name); 1 each when there is no profile."""
    if not shares:
        return {s: 1.0 for s in slots}
    # headroom, not share: cuBLAS's linear at batch 1 holds 37 % of the step but runs at ~0.8 of its
    # floor, while rope's 16 % is nearly all launches and elementwise passes a kernel can remove
    named = {s.slot: max(s.headroom, MIN_SHARE) for s in shares}
    return {s: named.get(s, MIN_SHARE) for s in slots}


def next_slot(active: Sequence[str], counts: dict[str, int], weight: dict[str, float]) -> str:
    """The active slot with the fewest candidates per unit of weight; ties: the heavier, then campaign order."""
    order = {s: i for i, s in enumerate(active)}
    return min(active, key=lambda s: ((counts.get(s, 0) + 1) / weight[s], -weight[s], order[s]))
