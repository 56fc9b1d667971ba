"""Migrations and the read-only guard on a real DuckDB file, no bus."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.registry.migrations import MIGRATIONS, Migration, apply_migrations, current_version
from services.registry.schema import ALL_TABLES
from services.registry.sql import Refused, check_read_only, json_value, render, run_query
from services.registry.views import VIEWS


def test_migrations_run_twice_and_across_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "r.duckdb")
    with duckdb.connect(path) as con:
        assert apply_migrations(con) == [m.version for m in MIGRATIONS]
        assert apply_migrations(con) == []
    with duckdb.connect(path) as con:
        assert apply_migrations(con) == []
        assert current_version(con) == MIGRATIONS[-1].version
        assert con.execute("SELECT count(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert set(ALL_TABLES) | {"schema_version"} <= tables
        for view in VIEWS:  # every view binds and answers on an empty registry
            assert con.execute(f"SELECT count(*) FROM {view}").fetchone()[0] == 0


def test_a_failing_migration_leaves_the_previous_version_intact(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "r.duckdb")) as con:
        apply_migrations(con)
        broken = (*MIGRATIONS, Migration(99, "broken", ("CREATE TABLE half (a INT)", "SELEC nonsense")))
        with pytest.raises(duckdb.ParserException):
            apply_migrations(con, broken)
        assert current_version(con) == MIGRATIONS[-1].version
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'half'").fetchone()[0] == 0


@pytest.mark.parametrize(
    "query",
    ["SELECT 1", "with a as (select 1 x) select * from a", "FROM range(3)", "EXPLAIN SELECT 1",
     "DESCRIBE SELECT 1 AS x", "SHOW TABLES", "SUMMARIZE SELECT 1 AS x", "PRAGMA show_tables",
     "pragma table_info('events')", "select 1;"],
)
def test_reads_are_accepted(query: str) -> None:
    check_read_only(duckdb.connect(), query)


@pytest.mark.parametrize(
    ("query", "refusal"),
    [
        ("INSERT INTO t VALUES (1)", "INSERT statements are refused"),
        ("update t set a = 1", "UPDATE statements are refused"),
        ("DELETE FROM t", "DELETE statements are refused"),
        ("CREATE TABLE t (a INT)", "CREATE statements are refused"),
        ("DROP TABLE t", "DROP statements are refused"),
        ("ATTACH 'x.db' AS x", "ATTACH statements are refused"),
        ("COPY t TO 'x.parquet'", "COPY statements are refused"),
        ("SET threads = 1", "SET statements are refused"),
        ("CHECKPOINT", "CALL statements are refused"),
        ("PRAGMA enable_profiling", "PRAGMA enable_profiling is refused"),
        ("SELECT 1; DROP TABLE t", "one statement per request, got 2"),
        ("   ", "empty query"),
    ],
)
def test_writes_and_ddl_are_refused(query: str, refusal: str) -> None:
    with pytest.raises(Refused, match=refusal):
        check_read_only(duckdb.connect(), query)


def test_run_query_caps_rows_renders_values_and_stays_read_only(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "r.duckdb")) as con:
        con.execute("CREATE TABLE t AS SELECT range AS i FROM range(50)")
        q = ev.SqlRequest(query="SELECT i, NULL::INTEGER AS n, i > 3 AS b, [i, 2] AS l, 1.5::DOUBLE AS d "
                                "FROM t ORDER BY i")
        reply = run_query(con, q, default_rows=10, row_limit=20, max_bytes=1 << 20)
        assert not reply.error and reply.truncated and len(reply.rows) == 10
        assert list(reply.columns) == ["i", "n", "b", "l", "d"]
        assert list(reply.types) == ["BIGINT", "INTEGER", "BOOLEAN", "BIGINT[]", "DOUBLE"]
        assert list(reply.rows[5].values) == ["5", "", "true", "[5,2]", "1.5"]
        assert list(reply.rows[5].is_null) == [False, True, False, False, False]
        big = run_query(con, ev.SqlRequest(query="SELECT * FROM t", max_rows=1000), default_rows=10,
                        row_limit=20, max_bytes=1 << 20)
        assert len(big.rows) == 20 and big.truncated  # the hard cap wins over the request
        tiny = run_query(con, ev.SqlRequest(query="SELECT * FROM t"), default_rows=100, row_limit=100,
                         max_bytes=40)
        assert tiny.truncated and 0 < len(tiny.rows) < 50  # the reply must fit in one message
        # EXPLAIN ANALYZE executes its statement: the READ ONLY transaction stops a write there
        sneaky = run_query(con, ev.SqlRequest(query="EXPLAIN ANALYZE INSERT INTO t VALUES (99)"),
                           default_rows=10, row_limit=10, max_bytes=1 << 20)
        assert "read-only" in sneaky.error
        assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 50
    assert render(float("nan")) == ("nan", False)
    assert render(b"\x01\xff") == ("\\x01ff", False)
    assert not any(row.json_values for row in reply.rows)  # only sent when asked: replies stay small


def test_json_values_keep_types_and_stay_valid_json(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "r.duckdb")) as con:
        q = ev.SqlRequest(query="SELECT 3 AS i, NULL AS n, false AS b, [1.5, 'inf'::DOUBLE] AS l, "
                                "{'a': [true], 'at': TIMESTAMP '2024-05-06 07:08:09'} AS s, 0.10::DECIMAL(4, 2) AS d, "
                                "'\\x01'::BLOB AS blob", json_values=True)
        reply = run_query(con, q, default_rows=10, row_limit=10, max_bytes=1 << 20)
        assert not reply.error, reply.error
        assert list(reply.rows[0].json_values) == [
            "3", "null", "false", '[1.5,"inf"]', '{"a":[true],"at":"2024-05-06 07:08:09"}', "0.1", '"\\\\x01"',
        ]
        assert list(reply.rows[0].values)[:3] == ["3", "", "false"]  # the text values come as well
    assert json_value(float("-inf")) == '"-inf"' and json_value({2: None}) == '{"2":null}'
