"""registry.sql: read-only SQL over the bus (SqlRequest → SqlReply).

A query is accepted only if DuckDB's own parser sees exactly one statement of a reading kind
(SELECT, which includes WITH / FROM / DESCRIBE / SHOW / SUMMARIZE, EXPLAIN, and a few showing
PRAGMAs). It then runs inside a READ ONLY transaction that is rolled back afterwards, so even
EXPLAIN ANALYZE of a write cannot change anything. Errors come back in `error`, never as rows.
Values travel as text; a request that sets `json_values` gets each one as JSON as well, so that a
client can keep numbers, booleans, nulls, lists and structs as what they are.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from decimal import Decimal
from typing import Any

import duckdb

from proto.gen.polymorph.v1 import events_pb2 as ev

READ_TYPES = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
READ_PRAGMAS = {
    "table_info", "show", "show_tables", "show_tables_expanded", "show_databases", "database_list",
    "database_size", "storage_info", "metadata_info", "version", "platform", "functions", "collations",
    "user_agent",
}
_PRAGMA_NAME = re.compile(r"^\s*pragma\s+([a-z_][a-z0-9_]*)", re.IGNORECASE)
ROW_OVERHEAD_BYTES = 8  # tag + length of a repeated SqlRow entry, generously


class Refused(ValueError):
    """The query is not a single read."""


def check_read_only(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Raise Refused (or DuckDB's parser error) unless `query` is exactly one reading statement."""
    statements = con.extract_statements(query)
    if not statements:
        raise Refused("empty query")
    if len(statements) > 1:
        raise Refused(f"read-only: one statement per request, got {len(statements)}")
    statement = statements[0]
    kind = statement.type
    if kind == duckdb.StatementType.PRAGMA:
        match = _PRAGMA_NAME.match(statement.query)
        name = match.group(1).lower() if match else "?"
        if name not in READ_PRAGMAS:
            raise Refused(f"read-only: PRAGMA {name} is refused (allowed: {', '.join(sorted(READ_PRAGMAS))})")
        return
    if kind not in READ_TYPES:
        raise Refused(f"read-only: {kind.name} statements are refused")


def render(value: Any) -> tuple[str, bool]:
    """A value as text for SqlRow; returns (text, is_null)."""
    if value is None:
        return "", True
    if isinstance(value, bool):
        return ("true" if value else "false"), False
    if isinstance(value, float):
        return (repr(value) if math.isfinite(value) else str(value).lower()), False
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat(), False
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex(), False
    if isinstance(value, list | tuple | dict):
        return json_value(value), False
    return str(value), False


def json_value(value: Any) -> str:
    """A value as JSON text for SqlRow.json_values: always valid JSON (no NaN literals)."""
    return json.dumps(_jsonable(value), separators=(",", ":"), allow_nan=False)


def _jsonable(value: Any) -> Any:
    """Numbers, booleans, null, lists and objects stay what they are; the rest becomes its text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else render(value)[0]  # JSON has no NaN or infinity
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):  # STRUCT, and MAP whose keys need not be text
        return {(k if isinstance(k, str) else render(k)[0]): _jsonable(v) for k, v in value.items()}
    return render(value)[0]  # times, intervals, UUIDs, blobs


def run_query(cur: duckdb.DuckDBPyConnection, request: ev.SqlRequest, *, default_rows: int, row_limit: int,
              max_bytes: int) -> ev.SqlReply:
    """Answer one request on `cur` (the reader cursor). Never raises for a refused or failing query."""
    max_rows = min(request.max_rows if request.max_rows > 0 else default_rows, row_limit)
    try:
        check_read_only(cur, request.query)
    except (Refused, duckdb.Error) as exc:
        return ev.SqlReply(error=str(exc))
    cur.execute("BEGIN TRANSACTION READ ONLY")
    try:
        cur.execute(request.query)
        description = cur.description or []
        reply = ev.SqlReply(columns=[d[0] for d in description], types=[str(d[1]) for d in description])
        size = reply.ByteSize()
        rows = cur.fetchmany(max_rows + 1) if description else []
        for values in rows[:max_rows]:
            rendered = [render(v) for v in values]
            row = ev.SqlRow(values=[t for t, _ in rendered], is_null=[n for _, n in rendered])
            if request.json_values:
                row.json_values.extend(json_value(v) for v in values)
            size += row.ByteSize() + ROW_OVERHEAD_BYTES
            if size > max_bytes:  # the reply must fit in one NATS message
                reply.truncated = True
                break
            reply.rows.append(row)
        if len(rows) > max_rows:
            reply.truncated = True
        return reply
    except duckdb.Error as exc:
        return ev.SqlReply(error=str(exc))
    finally:
        cur.execute("ROLLBACK")
