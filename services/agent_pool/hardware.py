"""Which engine serves a campaign's model, and whether the campaign may propose Triton kernels.

A campaign starts only for a model some engine host serves (`engine.discover`: hosts answer only for
their own model). Triton on a CPU runs in its interpreter, about 1000x slower than torch: every such
candidate would only waste the budget, so Triton is on only where the engine runs on a GPU;
POLYMORPH_AGENT_TRITON=on/off overrides.
"""

from __future__ import annotations

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.common.log import get_logger

log = get_logger("agent_pool.hardware")

GPU_WORDS = ("cuda", "nvidia", "gpu", "rocm", "h100", "h200", "a100", "l40", "rtx", "tesla", "instinct")


def is_gpu(hardware: str) -> bool:
    text = hardware.lower()
    return any(word in text for word in GPU_WORDS)


async def discover(bus: Bus, model: str, timeout_s: float) -> ev.EngineAddress | None:
    """The fast-tier engine that serves `model`, or None when none answers within `timeout_s`."""
    try:
        reply = await bus.request(
            subjects.ENGINE_DISCOVER, ev.DiscoverRequest(model=model, tier="fast"), ev.EngineAddress, timeout_s
        )
    except Exception as exc:
        log.info("no engine answered engine.discover", model=model, error=type(exc).__name__)
        return None
    if reply.error:
        log.info("engine.discover failed", model=model, error=reply.error)
        return None
    return reply


def triton_for(mode: str, engine: ev.EngineAddress | None) -> bool:
    if mode in ("on", "off"):
        return mode == "on"
    return engine is not None and is_gpu(engine.hardware)  # no engine: assume CPU


async def triton_enabled(bus: Bus, mode: str, model: str, timeout_s: float) -> bool:
    if mode in ("on", "off"):
        return mode == "on"
    return triton_for(mode, await discover(bus, model, timeout_s))
