"""The real stack for integration tests: nats-server plus the five services as separate processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.console import client, demo, progress
from services.console.stack import Stack

# Small campaigns keep the suite inside CI's budget on two cores.
STACK_ENV = {
    "POLYMORPH_LOG_LEVEL": "info",
    "POLYMORPH_CAMPAIGN_BUDGET": "10",
}


@pytest.fixture
def stack_env() -> dict[str, str]:
    """Settings a test module adds to STACK_ENV (override the fixture there)."""
    return {}


@pytest.fixture
def stack(tmp_path: Path, stack_env: dict[str, str]) -> Iterator[Stack]:
    s = Stack(tmp_path / "stack", extra_env={**STACK_ENV, **stack_env}, port=-1)
    s.start()
    try:
        yield s
    finally:
        s.stop()
        # leave the service logs in the pytest output when a test failed
        for log in sorted(s.log_dir.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()
            errors = [line for line in lines if '"level": "error"' in line][-5:]
            if errors:
                print(f"--- {log.name} (last errors)\n" + "\n".join(errors))


async def wait_ready(stack: Stack) -> None:
    await demo.wait_ready(stack.nats_url, stack)


async def wait_campaigns_settled(stack: Stack, timeout_s: float) -> progress.Snapshot:
    """Until every campaign ended, no winner awaits its verdict and the registry stored all it was sent
    (registry restarts tolerated)."""
    deadline = time.monotonic() + timeout_s
    last: progress.Snapshot | None = None
    while time.monotonic() < deadline:
        try:
            last = await progress.snapshot(stack.nats_url)
        except client.StackUnavailable:
            await asyncio.sleep(1)
            continue
        if last.settled:
            return last
        await asyncio.sleep(2)
    raise AssertionError(f"campaign did not settle in {timeout_s}s; last snapshot: {last}")
