"""Run one service as a process: logging, settings, bus connection, SIGTERM → graceful drain.

A service is any object with `async start(bus)` and `async stop()`; `python -m services.<name>`
calls `run_service(...)` with a factory that builds it from the environment. Once it has started, its
Prometheus endpoint serves (metrics.py).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Protocol

from services.common import metrics
from services.common.bus import Bus
from services.common.config import CommonSettings, Env
from services.common.identities import redact
from services.common.log import configure_logging, get_logger


class Service(Protocol):
    name: str

    async def start(self, bus: Bus) -> None: ...

    async def stop(self) -> None: ...


async def serve_forever(service: Service, common: CommonSettings, metrics_settings: metrics.MetricsSettings) -> None:
    log = get_logger(service.name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bus = await Bus.connect(common.nats_url, service.name)
    await service.start(bus)
    endpoint = metrics.serve(metrics_settings, service.name, common.data_dir)
    log.info("service started", service=service.name, nats=redact(common.nats_url), metrics=endpoint.url)
    await stop.wait()
    log.info("service stopping", service=service.name)
    endpoint.stop()
    await bus.close()  # finish in-flight handlers first, so their acks still go out
    await service.stop()
    log.info("service stopped", service=service.name)


def run_service(factory: Callable[[Env, CommonSettings], Service]) -> None:
    env = Env.current()
    common = CommonSettings.from_env(env)
    configure_logging(common.log_format, common.log_level)
    service = factory(env, common)
    asyncio.run(serve_forever(service, common, metrics.MetricsSettings.from_env(env, service.name)))
