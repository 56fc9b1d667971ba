"""Whether a campaign may propose Triton kernels: only where the engine runs on a GPU.

Triton on a CPU runs in its interpreter, about 1000x slower than torch: every such candidate would
only waste the budget. POLYMORPH_AGENT_TRITON=on/off overrides; auto asks an engine host
(`engine.discover`) which hardware it benchmarks on.
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


async def triton_enabled(bus: Bus, mode: str, model: str, timeout_s: float) -> bool:
    if mode in ("on", "off"):
        return mode == "on"
    try:
        reply = await bus.request(
            subjects.ENGINE_DISCOVER, ev.DiscoverRequest(model=model, tier="fast"), ev.EngineAddress, timeout_s
        )
    except Exception as exc:  # no engine answered: assume CPU, where Triton would only waste budget
        log.info("no engine to ask about hardware; Triton candidates off", model=model, error=type(exc).__name__)
        return False
    if reply.error:
        log.info("engine.discover failed; Triton candidates off", model=model, error=reply.error)
        return False
    return is_gpu(reply.hardware)
