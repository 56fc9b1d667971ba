"""Trace readers: the real formats, the generic mapping, and malformed lines counted, never fatal."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.traffic_profiler.fast_reader import load
from services.traffic_profiler.readers import UNITS, ColumnMapping, TraceReader, _datetime_s, detect_mapping, read_trace


def test_azure_csv_gives_trace_seconds(traces_dir: Path) -> None:
    reader = read_trace(traces_dir / "azure2023_code.csv")
    records = list(reader)
    assert (reader.records, reader.malformed) == (8819, 0)
    first, second = records[0], records[1]
    assert first.arrival_s == 0.0 and (first.prompt_tokens, first.output_tokens) == (4808, 10)
    assert second.arrival_s == pytest.approx(0.052, abs=1e-6)
    assert records[-1].arrival_s == pytest.approx(57 * 60, abs=60)


def test_mooncake_jsonl_keeps_block_hashes(traces_dir: Path) -> None:
    reader = read_trace(traces_dir / "mooncake_synthetic_trace.jsonl")
    records = list(reader)
    assert (reader.records, reader.malformed) == (3993, 0)
    assert records[0].block_hashes == list(range(79)) and records[0].prompt_tokens == 40160
    assert records[-1].arrival_s == pytest.approx(1022.025)


def test_malformed_csv_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.5,100,10\n"
        "2023-11-16 18:00:01.0,abc,10\n"          # not a number
        "2023-11-16 18:00:02.0,-4,10\n"           # negative
        "2023-11-16 18:00:03.0,100\n"             # a field short
        "\n"
        "not a time,100,10\n"                     # unparseable time
        "2023-11-16 18:00:04.5,200,20\n"
    )
    reader = read_trace(path)
    records = list(reader)
    assert [r.prompt_tokens for r in records] == [100, 200]
    assert records[1].arrival_s == pytest.approx(4.0)
    assert reader.malformed == 4 and len(reader.errors) == 4
    assert any("t.csv:3" in e for e in reader.errors) and any("expected 3 fields" in e for e in reader.errors)


def test_malformed_jsonl_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        json.dumps({"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}),
        "{broken json",
        "[1, 2, 3]",
        json.dumps({"timestamp": 2000, "output_length": 5}),
        json.dumps({"timestamp": 3000, "input_length": 600, "output_length": 5, "hash_ids": ["x"]}),
        json.dumps({"timestamp": 4000, "input_length": 700, "output_length": 7, "hash_ids": [1, 3]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    reader = read_trace(path)
    records = list(reader)
    assert [(r.arrival_s, r.prompt_tokens) for r in records] == [(0.0, 600), (3.0, 700)]
    assert reader.malformed == 4


def test_generic_mapping(tmp_path: Path) -> None:
    path = tmp_path / "custom.jsonl"
    rows = [{"ts": 5000 + 250 * i, "n_in": 100 + i, "n_out": 3, "hit": 50, "region": "eu"} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mapping = ColumnMapping.parse("arrival=ts:ms, prompt=n_in, output=n_out, cached=hit, tag=region")
    records = list(read_trace(path, mapping))
    assert [r.arrival_s for r in records] == [0.0, 0.25, 0.5, 0.75]
    assert records[3].prompt_tokens == 103 and records[0].cached_tokens == 50 and records[0].tag == "eu"


@pytest.mark.parametrize("spec", ["prompt=a,output=b", "arrival=t:hours,prompt=a,output=b",
                                  "arrival=t,prompt=a,output=b,colour=c", "arrival=t,prompt,output=b"])
def test_bad_mappings_are_clear_errors(spec: str) -> None:
    with pytest.raises(ValueError):
        ColumnMapping.parse(spec)


def test_unknown_format_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="column mapping"):
        list(read_trace(path))


def test_datetime_fast_path_matches_fromisoformat() -> None:
    for text in ("2023-11-16 18:17:03.9799600", "2023-11-16T00:00:00", "2024-02-29 23:59:59.5"):
        expected = datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
        assert _datetime_s(text, {}) == pytest.approx(expected, abs=1e-6)
    assert _datetime_s("2023-11-16T18:00:00+01:00", {}) == pytest.approx(
        datetime(2023, 11, 16, 17, tzinfo=UTC).timestamp())


def _both_paths(path: Path, mapping: ColumnMapping | None = None) -> tuple[list, list]:
    """Records from the whole-file fast path and from the line-by-line path (fast path refused)."""
    return list(read_trace(path, mapping)), list(_line_by_line(TraceReader(path, mapping)))


def _line_by_line(reader: TraceReader):
    import services.traffic_profiler.readers as readers

    original = readers.load
    readers.load = lambda *args: None  # the module's own switch: no fast path, every line parsed alone
    try:
        yield from reader
    finally:
        readers.load = original


@pytest.mark.parametrize("name", ["azure2023_conv.csv", "mooncake_synthetic_trace.jsonl"])
def test_fast_path_matches_line_reader_on_real_traces(traces_dir: Path, name: str) -> None:
    assert load(traces_dir / name, None, detect_mapping, UNITS, name.endswith(".jsonl")) is not None
    fast, slow = _both_paths(traces_dir / name)
    assert len(fast) > 1000 and fast == slow  # arrival times bit for bit, lists, everything


def test_fast_path_matches_line_reader_on_generic_files(tmp_path: Path) -> None:
    rows = [{"arrival_s": 10.5 + i / 3, "prompt_tokens": 100 + i, "output_tokens": i % 7,
             "cached_tokens": None if i % 3 else 40, "block_hashes": [i, i + 1] if i % 2 else [],
             "expert_counts": [i % 4, 2], "tag": ["eu", "us", ""][i % 3], "model": "m", "request_id": f"r{i}"}
            for i in range(50)]
    jsonl = tmp_path / "native.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    csv = tmp_path / "native.csv"
    csv.write_text("ts,n_in,n_out,hit,region\n" + "".join(
        f"{1_700_000_000_000 + 250 * i},{100 + i},{i % 5},{'' if i % 3 else 7},0{i % 2}\n" for i in range(50)))
    mapping = ColumnMapping.parse("arrival=ts:ms,prompt=n_in,output=n_out,cached=hit,tag=region")
    for path, m in ((jsonl, None), (csv, mapping)):
        assert load(path, m, detect_mapping, UNITS, path.suffix == ".jsonl") is not None
        fast, slow = _both_paths(path, m)
        assert len(fast) == 50 and fast == slow
    assert fast[0].tag == "00" and fast[1].cached_tokens is None and fast[3].cached_tokens == 7


def test_fast_path_refuses_files_with_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.5,100,10\n"
                    "2023-11-16 18:00:01.0,100,10.5\n2023-11-16 18:00:02.0,100,10\n")
    assert load(path, None, detect_mapping, UNITS, False) is None
    reader = read_trace(path)
    assert [r.arrival_s for r in reader] == [0.0, 1.5] and reader.malformed == 1
