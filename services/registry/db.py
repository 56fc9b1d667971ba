"""The DuckDB file, owned by this process alone, and the threads that touch it.

DuckDB calls block, so none runs on the event loop:
- the writer thread holds the connection and runs one transaction per call (`write`);
- a small pool of reader cursors of the same database (`readers.py`) runs registry.sql /
  registry.export (`read`), so a slow query stalls neither the consumers nor the other readers,
  and a query past its timeout is interrupted without touching the writer or another reader.
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
from services.registry.readers import ReaderPool

T = TypeVar("T")
log = get_logger("registry.db")


class Database:
    def __init__(
        self, path: Path, *, staging_dir: Path, lockdown: bool = True, threads: int = 2,
        memory_limit: str = "1GB", readers: int = 4,
    ) -> None:
        self.path = path
        self.staging_dir = staging_dir
        self._lockdown = lockdown
        self._config: dict[str, str | int] = {"threads": threads, "memory_limit": memory_limit}
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="registry-writer")
        self._con: duckdb.DuckDBPyConnection | None = None
        self._reader_count = readers
        self.readers: ReaderPool | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    async def open(self) -> list[int]:
        """Open (or create) the file and apply migrations; returns the versions applied now."""
        applied, cursors = await asyncio.get_running_loop().run_in_executor(self._writer, self._open)
        self.readers = ReaderPool(cursors)
        return applied

    def _open(self) -> tuple[list[int], list[duckdb.DuckDBPyConnection]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.staging_dir, ignore_errors=True)  # leftovers of an interrupted export
        self.staging_dir.mkdir(parents=True)
        con = duckdb.connect(str(self.path), config=dict(self._config))
        try:
            applied = apply_migrations(con)
            if self._lockdown:
                # SQL from the bus may read and write only the export staging directory, never
                # the rest of the registry host's file system. Irreversible, and database-wide:
                # it holds for every cursor, the readers' included.
                staging = str(self.staging_dir).replace("'", "''")
                con.execute(f"SET allowed_directories = ['{staging}']")
                con.execute("SET enable_external_access = false")
        except BaseException:
            con.close()
            raise
        self._con = con
        log.info("registry database open", path=str(self.path), migrations_applied=applied,
                 lockdown=self._lockdown, readers=self._reader_count)
        return applied, [con.cursor() for _ in range(self._reader_count)]

    async def close(self) -> None:
        if self.readers is not None:
            await self.readers.close()
        if self._con is not None:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._con.close)  # checkpoints the WAL
        self.readers = self._con = None
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
        """Run fn(cursor, *args) on a reader cursor; past timeout_s the query is interrupted (QueryTimeout)."""
        if self.readers is None:
            raise RuntimeError("registry database is not open")
        return await self.readers.run(fn, *args, timeout_s=timeout_s)

    @staticmethod
    def _require(con: duckdb.DuckDBPyConnection | None) -> duckdb.DuckDBPyConnection:
        if con is None:
            raise RuntimeError("registry database is not open")
        return con
