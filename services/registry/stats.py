"""What the registry holds, as Prometheus gauges. Counted from the tables rather than from messages, so
a redelivery, a rollback or a restart never skews them; refreshed a moment after a commit, once for a
burst of them (about 5 ms of DuckDB a time).
"""

from __future__ import annotations

import asyncio
import contextlib

import duckdb

from services.common import metrics
from services.common.log import get_logger
from services.registry.db import Database

log = get_logger("registry.stats")
Counts = dict[metrics.Sampled, metrics.Values]

GROUPED = (
    (metrics.REGISTRY_BENCHMARKS, "SELECT status, count(*) FROM benchmarks GROUP BY ALL"),
    (metrics.REGISTRY_VERDICTS, "SELECT status, coalesce(failed_stage, ''), count(*) FROM verdicts GROUP BY ALL"),
    (metrics.REGISTRY_DECISIONS, "SELECT decision, count(*) FROM verdicts WHERE decision IS NOT NULL GROUP BY ALL"),
    (metrics.REGISTRY_PROMOTIONS,
     "SELECT CASE WHEN demoted_at IS NOT NULL THEN 'demoted' WHEN active THEN 'active' ELSE 'replaced' END, "
     "count(*) FROM promotions GROUP BY ALL"),
)


def count(con: duckdb.DuckDBPyConnection) -> Counts:
    tables = [name for (name,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name").fetchall()]
    # duckdb_tables().estimated_size lags inside a transaction: count exactly (names from the catalog)
    rows = con.execute(" UNION ALL ".join(f"SELECT '{t}', count(*) FROM \"{t}\"" for t in tables)).fetchall()
    counts: Counts = {metrics.REGISTRY_ROWS: {(table,): float(n) for table, n in rows}}
    for gauge, sql in GROUPED:
        counts[gauge] = {tuple(str(v or "") for v in row[:-1]): float(row[-1]) for row in con.execute(sql).fetchall()}
    return counts


class Stats:
    def __init__(self, db: Database, delay_s: float = 0.5) -> None:
        self._db = db
        self._delay_s = delay_s
        self._due: asyncio.Task | None = None

    async def refresh(self) -> None:
        for gauge, values in (await self._db.write(count)).items():
            gauge.set(values)

    def changed(self) -> None:
        """Something committed: refresh soon (a refresh already due covers this change too)."""
        if self._due is None:
            self._due = asyncio.create_task(self._later())

    async def _later(self) -> None:
        await asyncio.sleep(self._delay_s)
        self._due = None  # a commit from here on schedules the next refresh
        with contextlib.suppress(Exception):  # the database closed meanwhile (stopping): nothing to show
            await self.refresh()
