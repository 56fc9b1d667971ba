"""Small helpers the tests share."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll until predicate() holds; fail the test after timeout_s."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def consumers(bus: Any) -> list[tuple[str, Any]]:
    """(stream, consumer info) of every durable consumer on every stream the loop uses."""
    from services.common import subjects

    out = []
    for stream in subjects.STREAMS:
        with contextlib.suppress(Exception):  # a stream nobody created yet
            out += [(stream.name, info) for info in await bus.js.consumers_info(stream.name)]
    return out


async def consumer_info(bus: Any, durable: str) -> Any:
    """A durable consumer's info, whichever stream it reads."""
    for _, info in await consumers(bus):
        if info.name == durable:
            return info
    raise AssertionError(f"no consumer {durable!r} on any stream")
