"""Verifier settings (POLYMORPH_VERIFIER_*), read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.common.config import CommonSettings, ConfigError, Env
from services.common.shapes import Shape, ShapeError
from services.common.shapes import parse_shapes as common_parse_shapes

# Odd shapes on purpose (a kernel hard-coded for the benchmark shape or for powers of two fails), and
# sizes past what a shortcut would cover: batch 8, context 411, prefills of 2 x 300 rows.
DEFAULT_RANDOM_SHAPES = "decode:3x37,prefill:1x61,decode:8x411,prefill:2x300"


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """'decode:3x37,prefill:1x61' → shapes; ConfigError names the bad item."""
    try:
        return common_parse_shapes(text)
    except ShapeError as exc:
        raise ConfigError(f"random shapes: {exc}") from exc


@dataclass(frozen=True)
class VerifierConfig:
    model: str
    data_dir: Path
    engine_address: str | None  # fixed host:port; None → engine.discover
    e2e_steps: int
    e2e_prompts: int
    random_shapes: tuple[Shape, ...]
    extra_calls: int  # further calls on fresh inputs in the random stage, each checked by the engine
    extra_s: float  # ... for at most this long
    max_captured: int  # captured input sets per slot, 0 = all the engine holds
    input_dtype: str  # the slot inputs' dtype, for the static precision-downgrade rule
    min_speedup_lo: float  # verify only benchmarks whose lower bound beats this
    rpc_timeout_s: float
    discover_timeout_s: float
    max_deliver: int  # attempts per benchmark message (engine down, source not yet seen)
    candidate_deliveries: int  # a benchmark whose candidate is still unknown after this many is refused

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
            extra_calls=env.int("VERIFIER_EXTRA_CALLS", 6000),
            extra_s=env.float("VERIFIER_EXTRA_S", 60.0),
            max_captured=env.int("VERIFIER_MAX_CAPTURED", 0),
            input_dtype=env.str("VERIFIER_INPUT_DTYPE", "float32"),
            min_speedup_lo=env.float("VERIFIER_MIN_SPEEDUP_LO", 1.0),
            rpc_timeout_s=env.float("VERIFIER_RPC_TIMEOUT_S", 300.0),
            discover_timeout_s=env.float("VERIFIER_DISCOVER_TIMEOUT_S", 5.0),
            max_deliver=env.int("VERIFIER_MAX_DELIVER", 40),
            candidate_deliveries=env.int("VERIFIER_CANDIDATE_DELIVERIES", 8),
        )
        if config.e2e_steps < 1 or config.e2e_prompts < 1:
            raise ConfigError("POLYMORPH_VERIFIER_E2E_STEPS and _E2E_PROMPTS must be ≥ 1")
        if config.input_dtype not in ("float64", "float32", "bfloat16", "float16"):
            raise ConfigError(f"POLYMORPH_VERIFIER_INPUT_DTYPE={config.input_dtype!r}: float32, bfloat16, ...")
        return config
