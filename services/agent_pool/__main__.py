"""`python -m services.agent_pool`: run the agent pool as its own process."""

from __future__ import annotations

from services.agent_pool.config import AgentPoolConfig
from services.agent_pool.service import AgentPoolService
from services.common.config import CommonSettings, Env
from services.common.runner import run_service


def build(env: Env, common: CommonSettings) -> AgentPoolService:
    return AgentPoolService(AgentPoolConfig.from_env(env), common)


if __name__ == "__main__":
    run_service(build)
