"""Trace files → Records: the Azure CSV and Mooncake JSONL formats, and a generic column mapping.

Generic mapping (CLI `--columns`, env POLYMORPH_TRAFFIC_PROFILER_COLUMNS), comma-separated `key=column`:
    arrival=COL[:UNIT]   arrival time; UNIT is s (default), ms, us, ns or datetime (ISO 8601)
    prompt=COL           prompt tokens                      (required)
    output=COL           output tokens                      (required)
    cached=COL           prefix-cache hit tokens            (optional)
    hashes=COL           prompt block hashes: a JSON list, or in CSV ints separated by spaces or ';'
    experts=COL          MoE tokens per expert, same list syntax
    tag=COL, model=COL, request_id=COL                      (optional)
e.g. `arrival=ts:ms,prompt=n_in,output=n_out,tag=region`. Files ending in .jsonl/.json/.ndjson are
read as one JSON object per line, anything else as CSV with a header row. Without a mapping the
format is detected from the header (Azure, Mooncake, or the RequestRecord field names).

Every record's arrival_s is trace time: seconds since the file's first record. A line that cannot be
parsed is counted, its first few reasons kept, and reading goes on. A clean file is parsed whole and
vectorised (fast_reader.py); a file with any bad line is read line by line, with the same result.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from services.traffic_profiler.fast_reader import load
from services.traffic_profiler.records import MalformedRecord, Record, validated

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "datetime": 1.0}
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
KEPT_ERRORS = 20
T = TypeVar("T")


@dataclass(frozen=True)
class ColumnMapping:
    arrival: str
    prompt: str
    output: str
    arrival_unit: str = "s"
    cached: str | None = None
    hashes: str | None = None
    experts: str | None = None
    tag: str | None = None
    model: str | None = None
    request_id: str | None = None

    @classmethod
    def parse(cls, spec: str) -> ColumnMapping:
        """Parse `arrival=ts:ms,prompt=in,output=out,...` (see the module docstring)."""
        fields: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, sep, column = part.partition("=")
            if not sep or not column:
                raise ValueError(f"column mapping entry {part!r} is not key=column")
            fields[key.strip()] = column.strip()
        known = {"arrival", "prompt", "output", "cached", "hashes", "experts", "tag", "model", "request_id"}
        unknown = set(fields) - known
        if unknown:
            raise ValueError(f"unknown column mapping keys {sorted(unknown)}; known: {sorted(known)}")
        missing = {"arrival", "prompt", "output"} - set(fields)
        if missing:
            raise ValueError(f"column mapping lacks {sorted(missing)}")
        arrival, _, unit = fields.pop("arrival").partition(":")
        unit = unit or "s"
        if unit not in UNITS:
            raise ValueError(f"arrival unit {unit!r} is not one of {sorted(UNITS)}")
        return cls(arrival=arrival, arrival_unit=unit, **fields)


AZURE = ColumnMapping(arrival="TIMESTAMP", arrival_unit="datetime", prompt="ContextTokens",
                      output="GeneratedTokens")
MOONCAKE = ColumnMapping(arrival="timestamp", arrival_unit="ms", prompt="input_length",
                         output="output_length", hashes="hash_ids")
NATIVE = ColumnMapping(arrival="arrival_s", prompt="prompt_tokens", output="output_tokens",
                       cached="cached_tokens", hashes="block_hashes", experts="expert_counts", tag="tag",
                       model="model", request_id="request_id")


def detect_mapping(columns: set[str]) -> ColumnMapping:
    for preset in (AZURE, MOONCAKE, NATIVE):
        if {preset.arrival, preset.prompt, preset.output} <= columns:
            def present(column: str | None) -> str | None:
                return column if column in columns else None

            return replace(preset, cached=present(preset.cached), hashes=present(preset.hashes),
                           experts=present(preset.experts), tag=present(preset.tag), model=present(preset.model),
                           request_id=present(preset.request_id))
    raise ValueError(
        f"unknown trace format (columns {sorted(columns)[:12]}); pass a column mapping such as "
        "'arrival=ts:ms,prompt=input_tokens,output=output_tokens'"
    )


@dataclass
class TraceReader:
    """Iterate a trace file's records; counts and explains malformed lines instead of raising."""

    path: Path
    mapping: ColumnMapping | None = None
    limit: int | None = None
    lines: int = 0
    records: int = 0
    malformed: int = 0
    out_of_order: int = 0  # records the file held before an earlier-stamped one (sorted when read whole)
    errors: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Record]:
        fast = load(self.path, self.mapping, detect_mapping, UNITS, self.path.suffix.lower() in JSON_SUFFIXES)
        if fast is not None:  # a clean file, parsed whole; anything else goes line by line below
            self.mapping, records, self.out_of_order = fast
            if self.limit is not None:
                records = itertools.islice(records, max(self.limit, 0))
            for record in records:
                self.lines += 1
                self.records += 1
                yield record
            return
        rows = self._json_rows() if self.path.suffix.lower() in JSON_SUFFIXES else self._csv_rows()
        origin: float | None = None
        dates: dict[str, float] = {}
        for line_no, row in rows:
            if self.limit is not None and self.records >= self.limit:
                return
            self.lines += 1
            try:
                if isinstance(row, str):
                    raise MalformedRecord(row)
                assert self.mapping is not None
                record = _to_record(row, self.mapping, dates)
                if origin is None:
                    origin = record.arrival_s
                record.arrival_s -= origin
            except (MalformedRecord, ValueError, TypeError, KeyError, OverflowError) as exc:
                self._bad(line_no, exc)
                continue
            self.records += 1
            yield record

    def _bad(self, line_no: int, exc: Exception) -> None:
        self.malformed += 1
        if len(self.errors) < KEPT_ERRORS:
            reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            self.errors.append(f"{self.path.name}:{line_no}: {reason[:200]}")

    def _json_rows(self) -> Iterator[tuple[int, dict | str]]:
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for line_no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield line_no, f"invalid JSON: {exc.msg}"
                    continue
                if not isinstance(row, dict):
                    yield line_no, "line is not a JSON object"
                    continue
                if self.mapping is None:
                    self.mapping = detect_mapping(set(row))
                yield line_no, row

    def _csv_rows(self) -> Iterator[tuple[int, dict | str]]:
        with open(self.path, newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                return
            header = [h.strip() for h in header]
            if self.mapping is None:
                self.mapping = detect_mapping(set(header))
            width = len(header)
            for row in reader:
                if not row:
                    continue
                if len(row) != width:
                    yield reader.line_num, f"expected {width} fields, got {len(row)}"
                    continue
                yield reader.line_num, dict(zip(header, row, strict=True))


def _field(column: str, convert: Callable[[object], T], value: object) -> T:
    """`convert(value)`, or a MalformedRecord that names the column."""
    try:
        return convert(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise MalformedRecord(f"field {column!r}: {exc}") from exc


def _to_record(row: dict, m: ColumnMapping, dates: dict[str, float]) -> Record:
    raw_t = row[m.arrival]
    arrival = (_field(m.arrival, lambda v: _datetime_s(v, dates), raw_t) if m.arrival_unit == "datetime"
               else _field(m.arrival, lambda v: float(v), raw_t) * UNITS[m.arrival_unit])  # type: ignore[arg-type]
    return validated(
        Record(
            arrival_s=arrival,
            prompt_tokens=_field(m.prompt, _int, row[m.prompt]),
            output_tokens=_field(m.output, _int, row[m.output]),
            cached_tokens=_field(m.cached, _optional_int, row.get(m.cached)) if m.cached else None,
            block_hashes=_field(m.hashes, _int_list, row.get(m.hashes)) if m.hashes else [],
            expert_counts=_field(m.experts, _int_list, row.get(m.experts)) if m.experts else [],
            tag=str(row.get(m.tag) or "") if m.tag else "",
            model=str(row.get(m.model) or "") if m.model else "",
            request_id=str(row.get(m.request_id) or "") if m.request_id else "",
        )
    )


def _int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number != int(number):
        raise MalformedRecord(f"not a whole number: {value!r}")
    return int(number)


def _optional_int(value: object) -> int | None:
    return None if value is None or value == "" else _int(value)


def _int_list(value: object) -> list[int]:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        try:  # the common case, a JSON list of ints, converts in C
            return list(map(int, value))
        except (TypeError, ValueError):
            return [_int(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):
        return [_int(v) for v in json.loads(text)]
    return [_int(v) for v in text.replace(";", " ").split()]


def _datetime_s(value: object, dates: dict[str, float]) -> float:
    """Seconds since the epoch; naive times are UTC. Fast path for 'YYYY-MM-DD HH:MM:SS.fffffff'."""
    text = str(value).strip()
    if len(text) >= 19 and text[10] in " T" and text[13] == ":" and text[16] == ":" and text[-1].isdigit() \
            and "+" not in text[19:] and "-" not in text[19:]:
        day = text[:10]
        midnight = dates.get(day)
        if midnight is None:
            midnight = datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()
            dates[day] = midnight
        return midnight + int(text[11:13]) * 3600 + int(text[14:16]) * 60 + float(text[17:])
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def read_trace(path: Path, mapping: ColumnMapping | None = None, limit: int | None = None) -> TraceReader:
    return TraceReader(Path(path), mapping, limit)
