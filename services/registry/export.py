"""registry.export: one Parquet file per table, written with DuckDB's COPY ... (FORMAT parquet).

Files are written into the staging directory (the only place DuckDB may write under lockdown),
from one read-only snapshot so the tables agree with each other, then moved into the requested
directory as <table>.parquet.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import duckdb

from proto.gen.polymorph.v1 import events_pb2 as ev


def table_names(cur: duckdb.DuckDBPyConnection) -> list[str]:
    rows = cur.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary ORDER BY table_name"
    ).fetchall()
    return [r[0] for r in rows]


def _quote_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def export_tables(cur: duckdb.DuckDBPyConnection, request: ev.ExportRequest, staging_root: Path) -> ev.ExportReply:
    if not request.dir:
        return ev.ExportReply(error="export: no directory given")
    dest = Path(request.dir).expanduser().resolve()
    staging = staging_root / uuid.uuid4().hex
    try:
        dest.mkdir(parents=True, exist_ok=True)
        staging.mkdir(parents=True)
        cur.execute("BEGIN TRANSACTION READ ONLY")
        try:
            written = []
            for table in table_names(cur):
                target = staging / f"{table}.parquet"
                cur.execute(f'COPY (SELECT * FROM "{table}") TO {_quote_path(target)} (FORMAT parquet)')
                written.append(target)
        finally:
            cur.execute("ROLLBACK")
        files = []
        for path in written:
            final = dest / path.name
            shutil.move(path, final)
            files.append(str(final))
        return ev.ExportReply(files=files)
    except (OSError, duckdb.Error) as exc:
        return ev.ExportReply(error=f"export to {dest} failed: {exc}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
