"""Render registry replies as rich tables, CSV or JSON rows."""

from __future__ import annotations

import csv
import io
import json

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


def sql_json(reply: ev.SqlReply) -> str:
    return json.dumps(rows(reply), indent=2)
