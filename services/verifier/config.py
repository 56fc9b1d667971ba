"""Verifier settings (POLYMORPH_VERIFIER_*), read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.common.config import CommonSettings, ConfigError, Env

# Odd shapes on purpose: a kernel hard-coded for the benchmark shape (or for powers of two) fails.
DEFAULT_RANDOM_SHAPES = "decode:3x37,prefill:1x61"
_PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class RandomShape:
    phase: str  # decode or prefill
    batch: int
    context: int

    def __str__(self) -> str:
        return f"{self.phase}:{self.batch}x{self.context}"


def parse_shapes(text: str) -> tuple[RandomShape, ...]:
    """'decode:3x37,prefill:1x61' → shapes; raises ConfigError with the bad item."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            phase, dims = item.split(":")
            batch, context = (int(v) for v in dims.lower().split("x"))
        except ValueError as exc:
            raise ConfigError(f"random shape {item!r} is not phase:BATCHxCONTEXT") from exc
        if phase not in _PHASES or batch < 1 or context < 1:
            raise ConfigError(f"random shape {item!r}: phase must be decode/prefill, sizes ≥ 1")
        shapes.append(RandomShape(phase, batch, context))
    return tuple(shapes)


@dataclass(frozen=True)
class VerifierConfig:
    model: str
    data_dir: Path
    engine_address: str | None  # fixed host:port; None → engine.discover
    e2e_steps: int
    e2e_prompts: int
    random_shapes: tuple[RandomShape, ...]
    max_captured: int  # captured input sets per slot, 0 = all the engine holds
    input_dtype: str  # the slot inputs' dtype, for the static precision-downgrade rule
    min_speedup_lo: float  # verify only benchmarks whose lower bound beats this
    rpc_timeout_s: float
    discover_timeout_s: float
    max_deliver: int  # attempts per benchmark message (engine down, source not yet seen)

    @classmethod
    def from_env(cls, env: Env, common: CommonSettings | None = None) -> VerifierConfig:
        common = common or CommonSettings.from_env(env)
        config = cls(
            model=common.model,
            data_dir=common.data_dir / "verifier",
            engine_address=env.optional("VERIFIER_ENGINE_ADDRESS"),
            e2e_steps=env.int("VERIFIER_E2E_STEPS", 8),
            e2e_prompts=env.int("VERIFIER_E2E_PROMPTS", 3),
            random_shapes=parse_shapes(env.str("VERIFIER_RANDOM_SHAPES", DEFAULT_RANDOM_SHAPES)),
            max_captured=env.int("VERIFIER_MAX_CAPTURED", 0),
            input_dtype=env.str("VERIFIER_INPUT_DTYPE", "float32"),
            min_speedup_lo=env.float("VERIFIER_MIN_SPEEDUP_LO", 1.0),
            rpc_timeout_s=env.float("VERIFIER_RPC_TIMEOUT_S", 300.0),
            discover_timeout_s=env.float("VERIFIER_DISCOVER_TIMEOUT_S", 5.0),
            max_deliver=env.int("VERIFIER_MAX_DELIVER", 40),
        )
        if config.e2e_steps < 1 or config.e2e_prompts < 1:
            raise ConfigError("POLYMORPH_VERIFIER_E2E_STEPS and _E2E_PROMPTS must be ≥ 1")
        if config.input_dtype not in ("float64", "float32", "bfloat16", "float16"):
            raise ConfigError(f"POLYMORPH_VERIFIER_INPUT_DTYPE={config.input_dtype!r}: float32, bfloat16, ...")
        return config
