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


def scrape(url: str, timeout_s: float = 5.0) -> dict[tuple[str, frozenset], float]:
    """Every sample a /metrics endpoint serves, fetched over HTTP: (name, labels) → value."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(url, timeout=timeout_s) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when there are none)."""
    want = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and want <= have)


def sandbox_relax() -> tuple[str, ...]:
    """Containment measures a GPU machine's driver does not start under (Landlock on the lent H100/H200),
    as a person running the GPU tests names them: POLYMORPH_ENGINE_SANDBOX_RELAX=landlock."""
    import os

    return tuple(m for m in os.environ.get("POLYMORPH_ENGINE_SANDBOX_RELAX", "").split(",") if m)
