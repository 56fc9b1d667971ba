"""Several SQL readers at once: a slow query holds up no other, and every reader stays locked down."""

from __future__ import annotations

import asyncio
import dataclasses
from functools import partial
from pathlib import Path

import duckdb
import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.registry.db import Database
from services.registry.sql import run_query
from tests.helpers import wait_for
from tests.registry.conftest import RunningRegistry
from tests.registry.helpers import scalar

# runs until something interrupts it: a cross join of a billion rows by a billion
SLOW = "SELECT sum(a.x * b.y) FROM range(1000000000) a(x), range(1000000000) b(y)"


async def test_three_slow_queries_do_not_hold_up_a_fourth(nats_url: str, registry_config, bus: Bus) -> None:
    running = RunningRegistry(nats_url, dataclasses.replace(registry_config, sql_timeout_s=15.0, sql_readers=4))
    await running.start()
    try:
        assert running.service is not None and running.service.db is not None
        readers = running.service.db.readers
        assert readers is not None
        slow = [asyncio.create_task(bus.request(subjects.REGISTRY_SQL, ev.SqlRequest(query=SLOW), ev.SqlReply,
                                                timeout_s=120)) for _ in range(3)]
        await wait_for(lambda: readers.busy == 3)  # all three are running on their readers

        assert await scalar(bus, "SELECT 42") == "42"
        assert not any(task.done() for task in slow)  # answered while all three slow ones still run
        assert readers.busy == 3

        for reply in await asyncio.gather(*slow):  # each stopped by its own timeout
            assert "interrupted after 15 s" in reply.error and not reply.rows
        assert await scalar(bus, "SELECT 43") == "43"  # and every reader serves again
    finally:
        await running.stop()


async def test_a_query_waits_for_a_free_reader_and_a_cancelled_one_is_interrupted(tmp_path: Path) -> None:
    db = Database(tmp_path / "r.duckdb", staging_dir=tmp_path / "staging", threads=1, readers=2)
    await db.open()
    assert db.readers is not None
    readers = db.readers
    try:
        def execute(cursor: duckdb.DuckDBPyConnection, query: str) -> list[tuple]:
            return cursor.execute(query).fetchall()

        slow = [asyncio.create_task(db.read(execute, SLOW)) for _ in range(2)]
        await wait_for(lambda: readers.busy == 2)
        quick = asyncio.create_task(db.read(execute, "SELECT 7"))
        await asyncio.sleep(0.5)
        assert not quick.done()  # both cursors are lent out: it waits, it never shares one

        slow[0].cancel()  # nobody waits for it: its cursor is interrupted and comes back
        assert await quick == [(7,)]
        assert not slow[1].done() and readers.busy == 1
        with pytest.raises(asyncio.CancelledError):
            await slow[0]
    finally:
        await db.close()  # interrupts the query still running
    with pytest.raises(duckdb.InterruptException):
        await slow[1]


async def test_every_pooled_cursor_is_locked_down_and_read_only(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    db = Database(tmp_path / "r.duckdb", staging_dir=staging, threads=1, readers=3)
    await db.open()
    outside = tmp_path / "outside.csv"
    seen: set[int] = set()

    def probe(cursor: duckdb.DuckDBPyConnection) -> str:
        seen.add(id(cursor))
        for statement in (
            "SELECT * FROM read_text('/etc/hostname')",
            f"COPY (SELECT 1) TO '{outside}'",
            f"ATTACH '{tmp_path / 'other.duckdb'}' AS other",
            "SET enable_external_access = true",
            "SET allowed_directories = ['/']",
        ):
            with pytest.raises(duckdb.Error):
                cursor.execute(statement)
        query = partial(run_query, default_rows=10, row_limit=10, max_bytes=1 << 20)
        written = query(cursor, ev.SqlRequest(query="EXPLAIN ANALYZE CREATE TABLE stolen AS SELECT 1"))
        return written.error

    try:
        for _ in range(3):  # free cursors are lent in turn: three reads meet all three
            assert "read-only" in await db.read(probe)
        assert len(seen) == 3
        assert not outside.exists() and not (tmp_path / "other.duckdb").exists()
        exists = await db.read(lambda cur: cur.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'stolen'").fetchone())
        assert exists == (0,)
    finally:
        await db.close()
