"""registry.sql and registry.export over the real bus."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.registry.migrations import MIGRATIONS
from services.registry.schema import ALL_TABLES
from tests.registry.conftest import RunningRegistry
from tests.registry.helpers import benchmark, candidate, rows, scalar, sql, verdict, wait_sql

COUNT = "SELECT count(*) FROM candidates"


async def seed(bus: Bus) -> None:
    c = candidate(1)
    await bus.publish(subjects.CANDIDATES_PROPOSED, c, msg_id=c.candidate_id)
    await bus.publish(subjects.CANDIDATES_BENCHMARKED, benchmark(c, speedup_lo=1.2, vs_reference=1.3),
                      msg_id=c.candidate_id)
    await bus.publish(subjects.CANDIDATES_VERIFIED, verdict(c), msg_id=c.candidate_id)
    await wait_sql(bus, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL", "1")


async def test_sql_refuses_writes_reports_errors_and_keeps_data(registry: RunningRegistry, bus: Bus) -> None:
    await seed(bus)
    refused = {
        "INSERT INTO candidates (candidate_id, received_at) VALUES ('x', now())": "INSERT statements are refused",
        "UPDATE promotions SET active = false": "UPDATE statements are refused",
        "DELETE FROM candidates": "DELETE statements are refused",
        "CREATE TABLE t (a INT)": "CREATE statements are refused",
        "DROP TABLE candidates": "DROP statements are refused",
        "ATTACH '/tmp/other.duckdb' AS other": "ATTACH statements are refused",
        "COPY candidates TO '/tmp/stolen.csv'": "COPY statements are refused",
        "SELECT 1; DELETE FROM candidates": "one statement per request, got 2",
    }
    for query, message in refused.items():
        reply = await sql(bus, query)
        assert reply.error.startswith("read-only:") and message in reply.error, (query, reply.error)
        assert not reply.rows and not reply.columns

    bad = await sql(bus, "SELECT no_such_column FROM candidates")
    assert "no_such_column" in bad.error and not bad.rows
    assert "syntax error" in (await sql(bus, "SELEC 1")).error.lower()
    # the file system outside the registry's own staging directory is out of reach
    assert "Permission" in (await sql(bus, "SELECT * FROM read_text('/etc/hostname')")).error
    assert await scalar(bus, COUNT) == "1"
    assert await scalar(bus, "SELECT count(*) FROM promotions WHERE active") == "1"

    reply = await sql(bus, "SELECT range AS i, CASE WHEN range % 2 = 0 THEN NULL ELSE 'odd' END AS s "
                           "FROM range(2000)")
    assert reply.truncated and len(reply.rows) == 1000  # the default cap
    assert list(reply.columns) == ["i", "s"] and list(reply.types) == ["BIGINT", "VARCHAR"]
    assert list(reply.rows[0].is_null) == [False, True] and list(reply.rows[1].values) == ["1", "odd"]
    small = await sql(bus, "SELECT * FROM range(10)", max_rows=3)
    assert small.truncated and [r.values[0] for r in small.rows] == ["0", "1", "2"]
    assert (await sql(bus, "DESCRIBE leaderboard")).rows
    assert await rows(bus, "SELECT slot, candidates, promoted FROM slot_summary") == [("rmsnorm", "1", "1")]


async def export(bus: Bus, name: str) -> ev.ExportReply:
    return await bus.request(subjects.REGISTRY_EXPORT, ev.ExportRequest(dir=name), ev.ExportReply)


async def test_export_writes_readable_parquet(registry: RunningRegistry, bus: Bus) -> None:
    await seed(bus)
    name = "snapshots/snap shot's"  # spaces and quotes in the name are fine
    reply = await export(bus, name)
    assert not reply.error, reply.error
    dest = registry.config.export_root / name
    assert {Path(f) for f in reply.files} == {dest / f"{t}.parquet" for t in (*ALL_TABLES, "schema_version")}
    candidates = pq.read_table(dest / "candidates.parquet")
    assert candidates.num_rows == 1 and candidates.column("slot").to_pylist() == ["rmsnorm"]
    assert pq.read_table(dest / "promotions.parquet").column("active").to_pylist() == [True]
    assert pq.read_table(dest / "events.parquet").num_rows == 4  # candidate, benchmark, verdict, kernel.promoted
    assert pq.read_table(dest / "schema_version.parquet").num_rows == len(MIGRATIONS)

    again = await export(bus, name)
    assert not again.error and len(again.files) == len(reply.files)  # overwrites a previous snapshot
    (registry.config.export_root / "a-file").write_text("not a directory")
    failed = await export(bus, "a-file")
    assert "export" in failed.error and not failed.files
    assert await scalar(bus, COUNT) == "1"


async def test_export_lands_only_under_the_export_root(registry: RunningRegistry, bus: Bus, tmp_path: Path) -> None:
    await seed(bus)
    root = registry.config.export_root
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "out").symlink_to(outside, target_is_directory=True)
    refused = {
        str(outside / "abs"): "is absolute",
        str(root / "inside-but-absolute"): "is absolute",
        "../escape": "no '..'",
        "snapshots/../../escape": "no '..'",
        ".staging": "starting with '.'",
        "snapshots/.hidden": "starting with '.'",
        ".": "the export root itself",
        "": "no directory given",
        "nul\x00byte": "NUL byte",
        "out": "leads outside the export root",
        "out/deeper": "leads outside the export root",
    }
    for name, message in refused.items():
        reply = await export(bus, name)
        assert message in reply.error and not reply.files, (name, reply.error)
    assert list(outside.iterdir()) == [] and not (tmp_path / "escape").exists()
    assert not (root / "inside-but-absolute").exists() and not (root.parent / "escape").exists()

    # a link planted where a file will go is replaced, never written through
    dest = root / "linked"
    dest.mkdir()
    victim = outside / "victim.parquet"
    victim.write_text("keep me")
    (dest / "candidates.parquet").symlink_to(victim)
    reply = await export(bus, "linked")
    assert not reply.error, reply.error
    assert victim.read_text() == "keep me"
    assert not (dest / "candidates.parquet").is_symlink()
    assert pq.read_table(dest / "candidates.parquet").num_rows == 1
    assert list(registry.config.staging_dir.iterdir()) == []  # nothing left behind in staging


async def test_a_query_past_the_timeout_is_interrupted(
    nats_url: str, registry_config, bus: Bus
) -> None:
    running = RunningRegistry(nats_url, dataclasses.replace(registry_config, sql_timeout_s=0.5))
    await running.start()
    try:
        slow = await sql(bus, "SELECT sum(x * x) FROM range(100000000000) t(x)")
        assert "interrupted" in slow.error
        assert await scalar(bus, "SELECT 42") == "42"  # the reader is usable again
    finally:
        await running.stop()
