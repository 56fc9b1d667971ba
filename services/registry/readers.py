"""A small pool of read-only cursors, so one slow query does not hold up the others.

Each cursor is a connection of its own to the registry's database: it shares the database's
settings (the lockdown of `allowed_directories` / `enable_external_access` holds for it too) but
runs, and is interrupted, on its own. A cursor is lent to one job at a time and comes back to the
pool only when nothing runs on it any more, whatever happened to the task that borrowed it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import duckdb

T = TypeVar("T")


class QueryTimeout(Exception):
    pass


class ReaderPool:
    def __init__(self, cursors: list[duckdb.DuckDBPyConnection]) -> None:
        if not cursors:
            raise ValueError("a reader pool needs at least one cursor")
        self.size = len(cursors)
        self._threads = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="registry-reader")
        self._free: asyncio.Queue[duckdb.DuckDBPyConnection] = asyncio.Queue()
        self._busy: set[duckdb.DuckDBPyConnection] = set()
        for cursor in cursors:
            self._free.put_nowait(cursor)

    @property
    def busy(self) -> int:
        """Cursors lent out now."""
        return len(self._busy)

    async def run(self, fn: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
        """Run fn(cursor, *args) on a free cursor (waiting for one); past timeout_s it is interrupted."""
        cursor = await self._free.get()
        self._busy.add(cursor)
        job = asyncio.get_running_loop().run_in_executor(self._threads, _leave_clean, fn, cursor, args)
        job.add_done_callback(lambda _: self._give_back(cursor))
        try:
            return await asyncio.wait_for(asyncio.shield(job), timeout_s)
        except TimeoutError:
            cursor.interrupt()
            with contextlib.suppress(Exception):
                await job
            raise QueryTimeout(f"query interrupted after {timeout_s:g} s") from None
        except asyncio.CancelledError:
            cursor.interrupt()  # nobody waits for the answer any more
            raise

    def _give_back(self, cursor: duckdb.DuckDBPyConnection) -> None:
        self._busy.discard(cursor)
        self._free.put_nowait(cursor)

    async def close(self) -> None:
        """Interrupt what still runs, then close every cursor once it is back."""
        for cursor in list(self._busy):
            cursor.interrupt()
        loop = asyncio.get_running_loop()
        for _ in range(self.size):
            cursor = await self._free.get()
            await loop.run_in_executor(self._threads, cursor.close)
        self._threads.shutdown(wait=True)


def _leave_clean(fn: Callable[..., T], cursor: duckdb.DuckDBPyConnection, args: tuple) -> T:
    try:
        return fn(cursor, *args)
    except BaseException:
        # an interrupt can land in a job's own ROLLBACK: the next borrower must not find a
        # transaction still open ("cannot start a transaction within a transaction")
        with contextlib.suppress(duckdb.Error):
            cursor.execute("ROLLBACK")
        raise
