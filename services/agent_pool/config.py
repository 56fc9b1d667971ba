"""Agent pool settings (POLYMORPH_CAMPAIGN_*, POLYMORPH_AGENT_*, POLYMORPH_LLM_*)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import ConfigError, Env
from services.common.slot_specs import OPS

TRITON_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class LlmSettings:
    base_url: str | None  # unset: the LLM agent is off
    model: str
    api_key: str
    share: float  # fraction of a slot's proposals the LLM agent makes
    temperature: float
    timeout_s: float

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)


@dataclass(frozen=True)
class AgentPoolConfig:
    budget: int  # candidates per campaign, all slots together
    slots: tuple[str, ...]  # empty: every library slot
    slot_budget: int  # candidates per slot at most (0: only the campaign budget, shared fairly)
    in_flight: int  # proposed candidates awaiting a result, per campaign
    plateau: int  # a slot stops after this many results without a new best
    min_gain: float  # a new best must beat the old one by this fraction
    compile_share: float  # at most this fraction of the budget may be torch.compile candidates
    explore: float  # probability the search agent explores instead of exploiting
    triton: str  # auto (only when the engine's hardware is a GPU), on, off
    seed: int
    result_timeout_s: float  # a candidate without a result after this long counts as lost
    republish_s: float  # a candidate without a result after this long is proposed again (then every as long)
    kv_bucket: str
    discover_timeout_s: float
    max_budget: int  # the largest budget one campaign may ask for
    max_campaigns: int  # campaigns running at once; drift campaigns past it wait, requests are refused
    step_failure_s: float  # a campaign whose steps keep failing this long ends as failed
    aim: bool  # profile the live step first and spend the budget by each slot's share of it
    warm_start: bool  # start from what earlier campaigns won (registry.experience)
    profile_timeout_s: float
    llm: LlmSettings

    @classmethod
    def from_env(cls, env: Env) -> AgentPoolConfig:
        slots = tuple(s.strip() for s in env.str("AGENT_SLOTS", "").split(",") if s.strip())
        unknown = [s for s in slots if s not in OPS]
        if unknown:
            raise ConfigError(f"POLYMORPH_AGENT_SLOTS names unknown slots {unknown}; known {sorted(OPS)}")
        triton = env.str("AGENT_TRITON", "auto").lower()
        if triton not in TRITON_MODES:
            raise ConfigError(f"POLYMORPH_AGENT_TRITON={triton!r} is not one of {TRITON_MODES}")
        config = cls(
            budget=env.int("CAMPAIGN_BUDGET", 30),
            slots=slots,
            slot_budget=env.int("AGENT_SLOT_BUDGET", 0),
            in_flight=env.int("AGENT_IN_FLIGHT", 6),
            plateau=env.int("AGENT_PLATEAU", 6),
            min_gain=env.float("AGENT_MIN_GAIN", 0.01),
            compile_share=env.float("AGENT_COMPILE_SHARE", 0.1),
            explore=env.float("AGENT_EXPLORE", 0.25),
            triton=triton,
            seed=env.int("AGENT_SEED", 0),
            result_timeout_s=env.float("AGENT_RESULT_TIMEOUT_S", 1800.0),
            republish_s=env.float("AGENT_REPUBLISH_S", 240.0),
            kv_bucket=env.str("AGENT_KV_BUCKET", "agent_pool"),
            discover_timeout_s=env.float("AGENT_DISCOVER_TIMEOUT_S", 2.0),
            max_budget=env.int("AGENT_MAX_BUDGET", 1000),
            max_campaigns=env.int("AGENT_MAX_CAMPAIGNS", 4),
            step_failure_s=env.float("AGENT_STEP_FAILURE_S", 120.0),
            aim=env.bool("AGENT_AIM", True),
            warm_start=env.bool("AGENT_WARM_START", True),
            profile_timeout_s=env.float("AGENT_PROFILE_TIMEOUT_S", 300.0),
            llm=LlmSettings(
                base_url=env.optional("LLM_BASE_URL"),
                model=env.str("LLM_MODEL", "gpt-4o-mini"),
                api_key=env.str("LLM_API_KEY", ""),
                share=env.float("LLM_SHARE", 0.25),
                temperature=env.float("LLM_TEMPERATURE", 0.7),
                timeout_s=env.float("LLM_TIMEOUT_S", 120.0),
            ),
        )
        if min(config.budget, config.in_flight, config.plateau, config.max_campaigns) < 1:
            raise ConfigError("POLYMORPH_CAMPAIGN_BUDGET, _AGENT_IN_FLIGHT, _AGENT_PLATEAU and "
                              "_AGENT_MAX_CAMPAIGNS must be >= 1")
        if config.budget > config.max_budget:
            raise ConfigError(f"POLYMORPH_CAMPAIGN_BUDGET={config.budget} exceeds "
                              f"POLYMORPH_AGENT_MAX_BUDGET={config.max_budget}")
        return config
