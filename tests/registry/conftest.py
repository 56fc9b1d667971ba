"""Registry fixtures: the real service on a real nats-server and a real DuckDB file in tmp_path."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.bus import Bus
from services.registry.config import RegistryConfig
from services.registry.service import RegistryService


@dataclasses.dataclass
class RunningRegistry:
    """The service with its own bus connection, as `python -m services.registry` would run it."""

    nats_url: str
    config: RegistryConfig
    service: RegistryService | None = None
    bus: Bus | None = None

    async def start(self) -> None:
        self.bus = await Bus.connect(self.nats_url, "registry")
        self.service = RegistryService(self.config)
        await self.service.start(self.bus)

    async def stop(self) -> None:
        if self.bus is not None:
            await self.bus.close()  # the runner's order: finish handlers, then close the database
        if self.service is not None:
            await self.service.stop()
        self.bus = self.service = None


@pytest.fixture
def registry_config(tmp_path: Path) -> RegistryConfig:
    return RegistryConfig(
        db_path=tmp_path / "data" / "registry.duckdb", sql_timeout_s=30.0, sql_max_rows=1000,
        sql_row_limit=100_000, sql_readers=4, export_root=tmp_path / "data" / "exports",
        max_deliver=100, lockdown=True, threads=1, memory_limit="512MB",
        signing_dir=tmp_path / "data" / "registry",
    )


@pytest.fixture
async def registry(nats_url: str, registry_config: RegistryConfig) -> AsyncIterator[RunningRegistry]:
    running = RunningRegistry(nats_url, registry_config)
    await running.start()
    yield running
    await running.stop()
