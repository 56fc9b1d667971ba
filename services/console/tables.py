"""Render registry replies as rich tables, CSV or JSON rows."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rich.table import Table

from proto.gen.polymorph.v1 import events_pb2 as ev


def rows(reply: ev.SqlReply) -> list[dict[str, str | None]]:
    return [
        {col: (None if row.is_null[i] else row.values[i]) for i, col in enumerate(reply.columns)}
        for row in reply.rows
    ]


def sql_table(reply: ev.SqlReply, title: str | None = None) -> Table:
    table = Table(title=title, show_lines=False)
    for col, typ in zip(reply.columns, reply.types, strict=False):
        numeric = any(t in typ.upper() for t in ("INT", "DOUBLE", "FLOAT", "DECIMAL", "REAL"))
        table.add_column(col, justify="right" if numeric else "left")
    for row in reply.rows:
        table.add_row(*("NULL" if null else value for value, null in zip(row.values, row.is_null, strict=True)))
    if reply.truncated:
        table.caption = f"truncated at {len(reply.rows)} rows"
    return table


def sql_csv(reply: ev.SqlReply) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(reply.columns)
    for row in reply.rows:
        writer.writerow(["" if null else v for v, null in zip(row.values, row.is_null, strict=True)])
    return out.getvalue()


def typed_rows(reply: ev.SqlReply) -> list[dict[str, Any]]:
    """Rows with the values' own types: numbers, booleans, null, lists and objects (the request
    asked for json_values; a row without them falls back to text)."""
    out = []
    for row in reply.rows:
        if len(row.json_values) == len(reply.columns):
            out.append({col: json.loads(text) for col, text in zip(reply.columns, row.json_values, strict=True)})
        else:
            out.append({col: (None if row.is_null[i] else row.values[i]) for i, col in enumerate(reply.columns)})
    return out


def sql_json(reply: ev.SqlReply) -> str:
    """One JSON object: columns, types, rows (objects keyed by column) and whether rows were left out."""
    document = {"columns": list(reply.columns), "types": list(reply.types), "rows": typed_rows(reply),
                "truncated": reply.truncated}
    return json.dumps(document, indent=2)


def truncation_notice(reply: ev.SqlReply) -> str:
    """The line for stderr when the registry left rows out; empty when it did not."""
    if not reply.truncated:
        return ""
    return (f"truncated: {len(reply.rows)} rows shown, the result has more (--max-rows N asks for more, "
            "up to the registry's row limit; a reply also stops where it would outgrow one NATS message)")
