"""Profiler settings come from POLYMORPH_TRAFFIC_PROFILER_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.config import CommonSettings, ConfigError, Env
from services.traffic_profiler.config import DetectorConfig, ProfilerConfig


def test_env_overrides_and_defaults() -> None:
    env = Env({"POLYMORPH_DATA_DIR": "/tmp/pm", "POLYMORPH_TRAFFIC_PROFILER_WINDOW_S": "30",
               "POLYMORPH_TRAFFIC_PROFILER_PERSISTENCE": "4", "POLYMORPH_TRAFFIC_PROFILER_CACHE_BLOCKS": "1000"})
    cfg = ProfilerConfig.from_env(env, CommonSettings.from_env(env))
    assert cfg.detector.window_s == 30.0 and cfg.detector.persistence == 4 and cfg.detector.cache_blocks == 1000
    assert cfg.detector.step_s == DetectorConfig().step_s
    assert cfg.state_dir == Path("/tmp/pm/traffic_profiler")


def test_bad_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        DetectorConfig.from_env(Env({"POLYMORPH_TRAFFIC_PROFILER_PERSISTENCE": "two"}))
