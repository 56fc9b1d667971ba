"""`python -m services.traffic_profiler`: the live profiler as its own process."""

from __future__ import annotations

from services.common.config import CommonSettings, Env
from services.common.runner import run_service
from services.traffic_profiler.config import ProfilerConfig
from services.traffic_profiler.service import TrafficProfiler


def build(env: Env, common: CommonSettings) -> TrafficProfiler:
    return TrafficProfiler(ProfilerConfig.from_env(env, common))


if __name__ == "__main__":
    run_service(build)
