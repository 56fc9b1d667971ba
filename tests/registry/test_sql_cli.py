"""`polymorph sql --format csv|json` against a running registry: --max-rows, truncation, JSON types."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import sys
from pathlib import Path

from tests.registry.conftest import RunningRegistry

TYPES = ("SELECT 1::INTEGER AS i, 2.5::DOUBLE AS d, NULL::VARCHAR AS n, true AS b, [1, 2, NULL] AS l, "
         "{'k': 1, 'day': DATE '2024-01-02'} AS s, 'text' AS t, 1.25::DECIMAL(5, 2) AS dec, "
         "'nan'::DOUBLE AS nan, 170141183460469231731687303715884105727::HUGEINT AS big, "
         "MAP {1: 'one'} AS m, '0 days'::INTERVAL + INTERVAL 90 MINUTE AS span")


async def polymorph(nats_url: str, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """The CLI as a subprocess, without blocking the loop the registry answers on."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli", "--data-dir", str(tmp_path / "cli"), "--nats", nats_url, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


async def test_csv_honours_max_rows_and_says_on_stderr_when_it_cut(
    registry: RunningRegistry, nats_url: str, tmp_path: Path
) -> None:
    code, out, err = await polymorph(nats_url, tmp_path, "sql", "SELECT range AS i FROM range(10)",
                                     "--format", "csv", "--max-rows", "4")
    assert code == 0, err
    assert csv_rows(out) == [["i"], ["0"], ["1"], ["2"], ["3"]]  # stdout is the CSV and nothing else
    assert "truncated: 4 rows shown" in err

    code, out, err = await polymorph(nats_url, tmp_path, "sql", "SELECT range AS i FROM range(2000)",
                                     "--format", "csv", "--max-rows", "1500")
    assert code == 0 and len(csv_rows(out)) == 1 + 1500 and "truncated: 1500 rows" in err

    code, out, err = await polymorph(nats_url, tmp_path, "sql", "SELECT range AS i FROM range(2000)",
                                     "--format", "csv")
    assert code == 0 and len(csv_rows(out)) == 1 + 1000 and "truncated: 1000 rows" in err  # the default cap

    code, out, err = await polymorph(nats_url, tmp_path, "sql", "SELECT range AS i FROM range(3)",
                                     "--format", "csv", "--max-rows", "3")
    assert code == 0 and len(csv_rows(out)) == 4 and err == ""  # everything came: nothing to say


async def test_json_keeps_types_and_says_when_it_cut(registry: RunningRegistry, nats_url: str, tmp_path: Path) -> None:
    code, out, err = await polymorph(nats_url, tmp_path, "sql", TYPES, "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["truncated"] is False
    assert document["columns"] == ["i", "d", "n", "b", "l", "s", "t", "dec", "nan", "big", "m", "span"]
    assert document["types"][:4] == ["INTEGER", "DOUBLE", "VARCHAR", "BOOLEAN"]
    [row] = document["rows"]
    assert row == {
        "i": 1, "d": 2.5, "n": None, "b": True, "l": [1, 2, None], "s": {"k": 1, "day": "2024-01-02"},
        "t": "text", "dec": 1.25, "nan": "nan", "big": 2**127 - 1, "m": {"1": "one"}, "span": "1:30:00",
    }
    assert type(row["i"]) is int and type(row["d"]) is float and type(row["b"]) is bool

    code, out, err = await polymorph(nats_url, tmp_path, "sql", "SELECT range AS i FROM range(10)",
                                     "--format", "json", "--max-rows", "3")
    assert code == 0, err
    document = json.loads(out)  # stdout stays one JSON document
    assert document["truncated"] is True and document["rows"] == [{"i": 0}, {"i": 1}, {"i": 2}]


async def test_export_names_a_directory_under_the_export_root(
    registry: RunningRegistry, nats_url: str, tmp_path: Path
) -> None:
    code, out, err = await polymorph(nats_url, tmp_path, "export", "monday")
    assert code == 0, err
    files = [Path(line) for line in out.splitlines()]
    assert files and all(f.parent == registry.config.export_root / "monday" and f.is_file() for f in files)

    code, out, err = await polymorph(nats_url, tmp_path, "export", str(tmp_path / "elsewhere"))
    assert code == 1 and out == "" and "is absolute" in err
    assert not (tmp_path / "elsewhere").exists()
