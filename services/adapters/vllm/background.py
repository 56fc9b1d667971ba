"""An asyncio loop on a daemon thread of the vLLM process, that can be stopped for real.

The adapter's bus work (following promotions, publishing traffic) must never run on vLLM's own
threads. nats-py retries a first connection forever when reconnects are unbounded, so a flag the
coroutine checks is not enough to end it: `stop` cancels its task on the loop's own thread and
waits for the thread (a client left reconnecting would log into whatever runs next).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any


class BackgroundLoop:
    def __init__(self, name: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._main = main
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._main())
        try:
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(self._task)
        finally:
            self._loop.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended and closed
            self._loop.call_soon_threadsafe(self._cancel)
        self._thread.join(timeout_s)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
