"""Ordered schema migrations, applied at start. Append new ones; never edit an applied one.

Each migration runs in its own transaction together with its schema_version row, so a crash
mid-way leaves the file at the previous version and the next start simply applies it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from services.common.log import get_logger
from services.registry.schema import SCHEMA_VERSION_DDL, STEP_PROFILE_FLOORS, STEP_PROFILES_DDL, TABLES
from services.registry.views import VIEWS

log = get_logger("registry.migrations")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: Sequence[str]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "tables", tuple(TABLES.values())),
    Migration(2, "views", tuple(VIEWS.values())),
    Migration(3, "step_profiles", (STEP_PROFILES_DDL,)),
    Migration(4, "step_profile_floors", STEP_PROFILE_FLOORS),
)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    con.execute(SCHEMA_VERSION_DDL)
    row = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def apply_migrations(
    con: duckdb.DuckDBPyConnection, migrations: Sequence[Migration] = MIGRATIONS
) -> list[int]:
    """Bring the file up to the newest version; returns the versions applied now (empty: none)."""
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise ValueError(f"migration versions must be unique and increasing: {versions}")
    applied: list[int] = []
    for migration in migrations:
        con.execute("BEGIN TRANSACTION")
        try:
            if migration.version <= current_version(con):
                con.execute("ROLLBACK")
                continue
            for statement in migration.statements:
                con.execute(statement)
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?)",
                [migration.version, migration.name, datetime.now(UTC).replace(tzinfo=None)],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        applied.append(migration.version)
        log.info("migration applied", version=migration.version, name=migration.name)
    return applied
