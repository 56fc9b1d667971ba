"""Configuration from the environment: the one place that reads os.environ.

Each service declares its own frozen dataclass with a `from_env(env: Env)` constructor; `Env` is
the typed reader they all share, so every variable is named `POLYMORPH_*` and parsed the same way.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PREFIX = "POLYMORPH_"


class ConfigError(ValueError):
    """A POLYMORPH_* variable holds a value that cannot be parsed."""


@dataclass(frozen=True)
class Env:
    values: Mapping[str, str]

    @classmethod
    def current(cls) -> Env:
        return cls(dict(os.environ))

    def _raw(self, name: str) -> str | None:
        value = self.values.get(PREFIX + name)
        return None if value is None or value == "" else value

    def str(self, name: str, default: str) -> str:
        value = self._raw(name)
        return default if value is None else value

    def int(self, name: builtins.str, default: int) -> int:
        value = self._raw(name)
        try:
            return default if value is None else int(value)
        except ValueError as exc:
            raise ConfigError(f"{PREFIX}{name}={value!r} is not an integer") from exc

    def float(self, name: builtins.str, default: float) -> float:
        value = self._raw(name)
        try:
            return default if value is None else float(value)
        except ValueError as exc:
            raise ConfigError(f"{PREFIX}{name}={value!r} is not a number") from exc

    def bool(self, name: builtins.str, default: bool) -> bool:
        value = self._raw(name)
        if value is None:
            return default
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{PREFIX}{name}={value!r} is not a boolean")

    def path(self, name: builtins.str, default: Path) -> Path:
        return Path(self.str(name, str(default)))

    def optional(self, name: builtins.str) -> builtins.str | None:
        return self._raw(name)


@dataclass(frozen=True)
class CommonSettings:
    nats_url: str
    data_dir: Path
    model: str
    log_format: str  # "json" in services, "console" in the CLI
    log_level: str

    @classmethod
    def from_env(cls, env: Env | None = None) -> CommonSettings:
        env = env or Env.current()
        return cls(
            nats_url=env.str("NATS_URL", "nats://127.0.0.1:4222"),
            data_dir=env.path("DATA_DIR", Path(".polymorph")).resolve(),  # absolute: children run from other dirs
            model=env.str("MODEL", "llama-tiny"),
            log_format=env.str("LOG_FORMAT", "json"),
            log_level=env.str("LOG_LEVEL", "info"),
        )
