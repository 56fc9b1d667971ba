"""registry.export: one Parquet file per table, written with DuckDB's COPY ... (FORMAT parquet).

The request names a directory under the registry's export root (`snapshots/monday`); whoever may
send it must not be able to name any other place on the registry host, so absolute paths, `..`,
hidden names (the staging directory among them) and symbolic links that lead out are refused.
Files are written into the staging directory (the only place DuckDB may write under lockdown),
from one read-only snapshot so the tables agree with each other, then renamed into place as
<table>.parquet (staging lies inside the export root: one file system, one rename each).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path, PurePath

import duckdb

from proto.gen.polymorph.v1 import events_pb2 as ev


class ExportRefused(ValueError):
    """The requested directory is not a plain directory under the export root."""


def export_dir(root: Path, name: str) -> Path:
    """The directory `name` names under `root`, resolved; raises ExportRefused for anything else."""
    if not name:
        raise ExportRefused("export: no directory given")
    if "\x00" in name:
        raise ExportRefused("export: the directory name holds a NUL byte")
    relative = PurePath(name)
    if relative.is_absolute() or relative.drive:
        raise ExportRefused(f"export: {name!r} is absolute; name a directory under the export root")
    if not relative.parts:
        raise ExportRefused(f"export: {name!r} is the export root itself; name a directory under it")
    if any(part.startswith(".") for part in relative.parts):  # '..' and the staging directory
        raise ExportRefused(f"export: {name!r}: no '..' and no names starting with '.'")
    base = root.resolve()
    target = (base / relative).resolve()  # follows symbolic links, so one that leads out shows
    if not target.is_relative_to(base) or target == base:
        raise ExportRefused(f"export: {name!r} leads outside the export root {base}")
    return target


def table_names(cur: duckdb.DuckDBPyConnection) -> list[str]:
    rows = cur.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary ORDER BY table_name"
    ).fetchall()
    return [r[0] for r in rows]


def _quote_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def export_tables(cur: duckdb.DuckDBPyConnection, request: ev.ExportRequest, root: Path,
                  staging_root: Path) -> ev.ExportReply:
    try:
        dest = export_dir(root, request.dir)
    except ExportRefused as exc:
        return ev.ExportReply(error=str(exc))
    staging = staging_root / uuid.uuid4().hex
    try:
        dest.mkdir(parents=True, exist_ok=True)
        export_dir(root, request.dir)  # again: a link swapped in meanwhile must not take the files out
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
            os.replace(path, final)  # replaces a link of that name itself, never what it points to
            files.append(str(final))
        return ev.ExportReply(files=files)
    except ExportRefused as exc:
        return ev.ExportReply(error=str(exc))
    except (OSError, duckdb.Error) as exc:
        return ev.ExportReply(error=f"export to {dest} failed: {exc}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
