"""The DuckDB file, owned by this process alone, and the two threads that touch it.

DuckDB calls block, so none runs on the event loop:
- the writer thread holds the connection and runs one transaction per call (`write`);
- the reader thread runs registry.sql / registry.export on a cursor of the same database
  (`read`), so a slow query never stalls the consumers, and a query past its timeout is
  interrupted without touching the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from services.common.log import get_logger
from services.registry.migrations import apply_migrations

T = TypeVar("T")
log = get_logger("registry.db")


class QueryTimeout(Exception):
    pass


class Database:
    def __init__(
        self, path: Path, *, staging_dir: Path, lockdown: bool = True, threads: int = 2,
        memory_limit: str = "1GB",
    ) -> None:
        self.path = path
        self.staging_dir = staging_dir
        self._lockdown = lockdown
        self._config: dict[str, str | int] = {"threads": threads, "memory_limit": memory_limit}
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="registry-writer")
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="registry-reader")
        self._con: duckdb.DuckDBPyConnection | None = None
        self._cursor: duckdb.DuckDBPyConnection | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    async def open(self) -> list[int]:
        """Open (or create) the file and apply migrations; returns the versions applied now."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, self._open)

    def _open(self) -> list[int]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.staging_dir, ignore_errors=True)  # leftovers of an interrupted export
        self.staging_dir.mkdir(parents=True)
        con = duckdb.connect(str(self.path), config=dict(self._config))
        try:
            applied = apply_migrations(con)
            if self._lockdown:
                # SQL from the bus may read and write only the export staging directory, never
                # the rest of the registry host's file system. Irreversible for this connection.
                staging = str(self.staging_dir).replace("'", "''")
                con.execute(f"SET allowed_directories = ['{staging}']")
                con.execute("SET enable_external_access = false")
        except BaseException:
            con.close()
            raise
        self._con = con
        self._cursor = con.cursor()
        log.info("registry database open", path=str(self.path), migrations_applied=applied,
                 lockdown=self._lockdown)
        return applied

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        if self._cursor is not None:
            await loop.run_in_executor(self._reader, self._cursor.close)
        if self._con is not None:
            await loop.run_in_executor(self._writer, self._con.close)  # checkpoints the WAL
        self._cursor = self._con = None
        self._reader.shutdown(wait=True)
        self._writer.shutdown(wait=True)

    # -- work ---------------------------------------------------------------------------------
    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run fn(con, *args) in one transaction on the writer thread: all of it commits or none."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, self._transaction, fn, args)

    def _transaction(self, fn: Callable[..., T], args: tuple) -> T:
        con = self._require(self._con)
        con.execute("BEGIN TRANSACTION")
        try:
            result = fn(con, *args)
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        return result

    async def read(self, fn: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
        """Run fn(cursor, *args) on the reader thread; past timeout_s the query is interrupted."""
        cursor = self._require(self._cursor)
        future = asyncio.get_running_loop().run_in_executor(self._reader, fn, cursor, *args)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            cursor.interrupt()
            with contextlib.suppress(Exception):
                await future
            raise QueryTimeout(f"query interrupted after {timeout_s:g} s") from None

    @staticmethod
    def _require(con: duckdb.DuckDBPyConnection | None) -> duckdb.DuckDBPyConnection:
        if con is None:
            raise RuntimeError("registry database is not open")
        return con
