"""The adapter's settings, from POLYMORPH_* variables in vLLM's environment (services/common/config.py).

POLYMORPH_NATS_URL           the bus, with the `serving` identity's credentials in it (`polymorph
                             credentials` writes them); unset: no sidecar, no traffic (vLLM unchanged)
POLYMORPH_MODEL              the Polymorph model name promotions for this checkpoint carry
POLYMORPH_SERVING_HARDWARE   the hardware promotions must name (default: this worker's device name)
POLYMORPH_REGISTRY_PUBLIC_KEY or _FILE   the registry's Ed25519 key: only promotions it signed are served
POLYMORPH_SERVING_STATE_DIR  where each worker writes its op table's state (JSON, one file per process)
POLYMORPH_SERVING_SWAPS      on (default) / off: follow promotions, or only count and report
POLYMORPH_TRAFFIC_TAG        a tag on every request record (tenant, region, ...)
POLYMORPH_TRAFFIC_QUEUE      request records kept while NATS is slow or away (older ones are dropped)
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from services.common.config import Env


@dataclass(frozen=True)
class AdapterSettings:
    nats_url: str
    model: str
    hardware: str
    registry_key: str
    registry_key_file: str
    state_dir: Path
    swaps: bool
    traffic_tag: str
    traffic_queue: int

    @classmethod
    def from_env(cls, env: Env | None = None) -> AdapterSettings:
        env = env or Env.current()
        return cls(
            nats_url=env.str("NATS_URL", ""),
            model=env.str("MODEL", ""),
            hardware=env.str("SERVING_HARDWARE", ""),
            registry_key=env.str("REGISTRY_PUBLIC_KEY", ""),
            registry_key_file=env.str("REGISTRY_PUBLIC_KEY_FILE", ""),
            state_dir=env.path("SERVING_STATE_DIR", Path(tempfile.gettempdir()) / "polymorph-serving"),
            swaps=env.bool("SERVING_SWAPS", True),
            traffic_tag=env.str("TRAFFIC_TAG", ""),
            traffic_queue=env.int("TRAFFIC_QUEUE", 10_000),
        )
