"""Whole-file, vectorised trace parsing (pyarrow): the fast path of `readers.TraceReader`.

`load` parses and validates a whole file at once and returns its records, or None as soon as anything
is not clean: a malformed line, a missing or non-numeric value, a value `validated` would reject, a
column type or syntax it does not handle (CSV list columns, non-string tags), or a file too large to
hold in memory. The reader then falls back to its line-by-line path, which counts and explains every
bad line, so the fast path never changes what is reported, only how fast a clean file is read.

Arrival times come out bit for bit as the line-by-line path computes them (same float operations).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from services.traffic_profiler.records import MAX_TOKENS, Record

MAX_BYTES = 1 << 30  # larger files are streamed line by line rather than parsed whole in memory
_DATETIME = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,9})?$"  # naive ISO 8601, at most ns
_NS_PER_MIN = 60_000_000_000
_TEXT = ("tag", "model", "request_id")


class NotClean(Exception):
    """The file needs the line-by-line reader."""


def load(path: Path, mapping, detect, units: dict[str, float], json_file: bool):
    """(mapping, records in arrival order with arrival_s relative to the earliest, how many records the
    file held out of order) for a clean file, else None (before any record)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        table, mapping = _json(path, mapping, detect) if json_file else _csv(path, mapping, detect)
        table, t, out_of_order = _sorted(table, _arrivals(_column(table, mapping.arrival), mapping.arrival_unit,
                                                           units))
        return mapping, _records(table, t, mapping), out_of_order
    except (NotClean, pa.ArrowException, ValueError, TypeError, KeyError, OverflowError, OSError):
        return None


def _csv(path: Path, mapping, detect):
    with open(path, newline="", encoding="utf-8") as fh:
        header = [h.strip() for h in fh.readline().rstrip("\r\n").split(",")]
    if not header or not header[0] or len(set(header)) != len(header):
        raise NotClean("no usable header")
    mapping = mapping or detect(set(header))
    if mapping.hashes or mapping.experts:
        raise NotClean("list columns in CSV")  # their ' '/';' syntax is left to the line reader
    strings = [getattr(mapping, k) for k in _TEXT if getattr(mapping, k)]
    if mapping.arrival_unit == "datetime":
        strings.append(mapping.arrival)
    table = pcsv.read_csv(
        path,
        read_options=pcsv.ReadOptions(column_names=header, skip_rows=1),
        convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in strings}),
    )
    return table, mapping


def _json(path: Path, mapping, detect):
    table = pjson.read_json(path)
    mapping = mapping or detect(set(table.column_names))
    return table, mapping


def _column(table: pa.Table, name: str | None) -> pa.ChunkedArray | None:
    if name is None:
        return None
    if name not in table.column_names:
        raise NotClean(f"no column {name}")
    return table[name]


def _tokens(col: pa.ChunkedArray, nullable: bool = False) -> np.ndarray:
    """Whole, in-range token counts as int64 (NaN-free); raises NotClean otherwise."""
    if col.null_count and not nullable:
        raise NotClean("missing value")
    if pa.types.is_integer(col.type):
        values = col.to_numpy(zero_copy_only=False)
        if col.null_count:
            values = np.where(col.is_null().to_numpy(zero_copy_only=False), 0, values)
        values = values.astype(np.int64)
    elif pa.types.is_floating(col.type):
        raw = col.fill_null(0.0).to_numpy(zero_copy_only=False).astype(float)
        if not np.all(np.isfinite(raw)) or np.any(raw != np.floor(raw)) or np.any(np.abs(raw) > MAX_TOKENS):
            raise NotClean("not a whole number")
        values = raw.astype(np.int64)
    else:
        raise NotClean(f"token column of type {col.type}")
    if values.size and (values.min() < 0 or values.max() > MAX_TOKENS):
        raise NotClean("token count out of range")
    return values


def _arrivals(col: pa.ChunkedArray, unit: str, units: dict[str, float]) -> np.ndarray:
    if col.null_count:
        raise NotClean("missing arrival")
    if unit == "datetime":
        if not pa.types.is_string(col.type) or not pc.all(pc.match_substring_regex(col, _DATETIME)).as_py():
            raise NotClean("arrival is not a naive ISO 8601 time")
        ns = pc.cast(col, pa.timestamp("ns")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        # as readers._datetime_s: whole minutes since the epoch (exact) + float seconds, one rounding
        minutes, rest = np.divmod(ns, _NS_PER_MIN)
        return (minutes * 60).astype(float) + rest / 1e9
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise NotClean(f"arrival of type {col.type}")
    t = col.to_numpy(zero_copy_only=False).astype(float) * units[unit]
    if not np.all(np.isfinite(t)):
        raise NotClean("arrival is not finite")
    return t


CHUNK = 65_536  # records are built lazily, this many at a time: a long trace's columns stay numpy


def _lists(col: pa.ChunkedArray | None, negative_ok: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """(flat values, row offsets) of an integer list column (null rows are empty); None when absent."""
    if col is None:
        return None
    arr = col.combine_chunks()
    if pa.types.is_null(arr.type):
        return None
    if not pa.types.is_list(arr.type) or not pa.types.is_integer(arr.type.value_type):
        raise NotClean(f"list column of type {arr.type}")
    arr = arr.fill_null([])
    flat = arr.flatten()
    if flat.null_count:
        raise NotClean("null in a list")
    values = flat.to_numpy(zero_copy_only=False)
    if not negative_ok and values.size and values.min() < 0:
        raise NotClean("negative expert count")
    offsets = arr.offsets.to_numpy(zero_copy_only=False)
    return values, offsets - offsets[0]


def _texts(col: pa.ChunkedArray | None) -> pa.Array | None:
    if col is None or pa.types.is_null(col.type):
        return None
    if not pa.types.is_string(col.type):
        raise NotClean(f"text column of type {col.type}")
    return col.fill_null("").combine_chunks()


def _chunk_lists(lists: tuple[np.ndarray, np.ndarray] | None, lo: int, hi: int):
    if lists is None:
        return ([] for _ in range(hi - lo))  # a list of its own per record, as the dataclass default
    flat, offsets = lists
    base = int(offsets[lo])
    values = flat[base:int(offsets[hi])].tolist()
    bounds = (offsets[lo:hi + 1] - base).tolist()
    return [values[bounds[i]:bounds[i + 1]] for i in range(hi - lo)]


def _sorted(table: pa.Table, t: np.ndarray) -> tuple[pa.Table, np.ndarray, int]:
    """The rows in arrival order (stable), and how many came before an earlier-stamped row: a file that
    is not time-sorted is sorted here, at numpy speed, not fed to the detector out of order."""
    if t.size < 2 or bool(np.all(t[1:] >= t[:-1])):
        return table, t, 0
    out_of_order = int(np.count_nonzero(t < np.maximum.accumulate(t)))
    order = np.argsort(t, kind="stable")
    return table.take(pa.array(order)), t[order], out_of_order


def _records(table: pa.Table, t: np.ndarray, m) -> Iterator[Record]:
    """Validate every column now (NotClean before any record exists); build the records lazily."""
    n = table.num_rows
    if n:
        t = t - t[0]
    prompt, output = _tokens(_column(table, m.prompt)), _tokens(_column(table, m.output))
    cached = cached_null = None
    if (col := _column(table, m.cached)) is not None and not pa.types.is_null(col.type):
        cached, cached_null = _tokens(col, nullable=True), col.is_null().to_numpy(zero_copy_only=False)
    hashes = _lists(_column(table, m.hashes))
    experts = _lists(_column(table, m.experts), negative_ok=False)
    tag, model, request_id = (_texts(_column(table, getattr(m, k))) for k in _TEXT)
    plain = cached is None and hashes is None and experts is None and tag is model is request_id is None
    return _build(n, t, prompt, output, None if plain else (cached, cached_null, hashes, experts, model, tag,
                                                             request_id))


def _build(n: int, t: np.ndarray, prompt: np.ndarray, output: np.ndarray, extra: tuple | None) -> Iterator[Record]:
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        columns = [t[lo:hi].tolist(), prompt[lo:hi].tolist(), output[lo:hi].tolist()]
        if extra is None:
            yield from itertools.starmap(Record, zip(*columns, strict=True))
            continue
        cached, cached_null, hashes, experts, model, tag, request_id = extra
        columns.append(itertools.repeat(None) if cached is None else
                       [None if null else v for v, null in
                        zip(cached[lo:hi].tolist(), cached_null[lo:hi].tolist(), strict=True)])
        columns += [_chunk_lists(hashes, lo, hi), _chunk_lists(experts, lo, hi)]
        columns += [itertools.repeat("") if a is None else a.slice(lo, hi - lo).to_pylist()
                    for a in (model, tag, request_id)]
        yield from itertools.starmap(Record, zip(*columns, strict=False))  # repeat() columns are endless
