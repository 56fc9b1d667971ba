"""Engine host settings (POLYMORPH_ENGINE_*)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from services.common.config import ConfigError, Env
from services.common.shapes import Shape, ShapeError
from services.common.shapes import parse_shapes as common_parse_shapes
from services.common.signing import PUBLIC_FILE

# CPU-sized defaults: short decode at two batch sizes and a short prefill, weighted like chat traffic
DEFAULT_SHAPES = "decode:1:256:0.4,decode:4:256:0.4,prefill:1:128:0.2"


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """"phase:batch:context[:weight],..." → shapes; ConfigError names the bad item."""
    try:
        return common_parse_shapes(text)
    except ShapeError as exc:
        raise ConfigError(str(exc)) from exc


def _measures(text: str) -> tuple[str, ...]:
    from services.engine_host.containment import MEASURES

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in MEASURES]
    if unknown:
        raise ConfigError(f"POLYMORPH_ENGINE_SANDBOX_RELAX names unknown measures {unknown}; known {MEASURES}")
    return names


@dataclass(frozen=True)
class EngineHostConfig:
    engine_id: str
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 0
    advertise_host: str = ""  # what engine.discover answers; empty: grpc_host
    device: str = "auto"
    seed: int = 0
    fast_layers: int = 2
    tiers: tuple[str, ...] = ("fast", "slow")
    candidate_timeout_s: float = 60.0
    start_timeout_s: float = 600.0
    threads: int = 1
    max_batch: int = 32
    max_tokens: int = 1024  # prefill buckets are cut to this many tokens (batch first)
    max_seq: int = 0  # static KV cache length (decode attention reads all of it); 0: the model's own maximum
    max_shapes: int = 4  # the heaviest buckets a benchmark runs at
    rounds: int = 10
    samples: int = 5
    sample_s: float = 2e-3
    noise_floor: float = 0.01
    default_shapes: tuple[Shape, ...] = parse_shapes(DEFAULT_SHAPES)
    capture_per_slot: int = 8
    consume: bool = True  # take candidates from candidates.proposed
    durable: str = "engine-fast"
    checkpoint: str = ""  # safetensors weights for the model (both tiers); empty: seeded random weights
    sandbox_pool: int = 1  # warm sandboxes each tier keeps ready for the next candidate
    sandbox_relax: tuple[str, ...] = ()  # containment measures switched off (benchmarks/sandbox_probe.py)
    jit_timeout_s: float = 180.0  # a Triton / torch.compile candidate's first call may compile this long
    registry_key: str = ""  # the registry's public key (base64); empty: read registry_key_file
    registry_key_file: str = ""  # where the registry writes it (the embedded stack's data dir)

    @classmethod
    def from_env(cls, env: Env, model: str = "llama-tiny", data_dir: Path = Path(".polymorph")) -> EngineHostConfig:
        tiers = tuple(t.strip() for t in env.str("ENGINE_TIERS", "fast,slow").split(",") if t.strip())
        if not tiers or any(t not in ("fast", "slow") for t in tiers):
            raise ConfigError(f"POLYMORPH_ENGINE_TIERS={tiers!r}: expected fast, slow or both")
        return cls(
            engine_id=env.str("ENGINE_ID", f"{socket.gethostname()}-{model}"),
            grpc_host=env.str("ENGINE_GRPC_HOST", "127.0.0.1"),
            grpc_port=env.int("ENGINE_GRPC_PORT", 0),
            advertise_host=env.str("ENGINE_ADVERTISE_HOST", ""),
            device=env.str("ENGINE_DEVICE", "auto"),
            seed=env.int("ENGINE_SEED", 0),
            fast_layers=env.int("ENGINE_FAST_LAYERS", 2),
            tiers=tiers,
            candidate_timeout_s=env.float("ENGINE_CANDIDATE_TIMEOUT_S", 60.0),
            start_timeout_s=env.float("ENGINE_START_TIMEOUT_S", 600.0),
            threads=env.int("ENGINE_THREADS", 1),
            max_batch=env.int("ENGINE_MAX_BATCH", 32),
            max_tokens=env.int("ENGINE_MAX_TOKENS", 1024),
            max_seq=env.int("ENGINE_MAX_SEQ", 0),
            max_shapes=env.int("ENGINE_MAX_SHAPES", 4),
            rounds=env.int("ENGINE_ROUNDS", 10),
            samples=env.int("ENGINE_SAMPLES", 5),
            sample_s=env.float("ENGINE_SAMPLE_S", 2e-3),
            noise_floor=env.float("ENGINE_NOISE_FLOOR", 0.01),
            default_shapes=parse_shapes(env.str("ENGINE_DEFAULT_SHAPES", DEFAULT_SHAPES)),
            capture_per_slot=env.int("ENGINE_CAPTURE_PER_SLOT", 8),
            consume=env.bool("ENGINE_CONSUME", True),
            durable=env.str("ENGINE_DURABLE", "engine-fast"),
            checkpoint=env.str("ENGINE_CHECKPOINT", ""),
            sandbox_pool=env.int("ENGINE_SANDBOX_POOL", 1),
            sandbox_relax=_measures(env.str("ENGINE_SANDBOX_RELAX", "")),
            jit_timeout_s=env.float("ENGINE_JIT_TIMEOUT_S", 180.0),
            registry_key=env.str("REGISTRY_PUBLIC_KEY", ""),
            registry_key_file=env.str("REGISTRY_PUBLIC_KEY_FILE", str(data_dir / "registry" / PUBLIC_FILE)),
        )
