"""Messages the registry owes the bus, written in the same transaction as the decision behind them.

Publishing after the commit means a crash in between leaves the row unpublished; the next handler
(or the next start) publishes it. The stable msg_id makes JetStream drop a repeat within its window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import duckdb
from google.protobuf.message import Message

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.bus import Bus
from services.common.log import get_logger
from services.common.signing import Signer
from services.registry.db import Database

log = get_logger("registry.outbox")


@dataclass(frozen=True)
class Pending:
    subject: str
    msg_id: str
    message_type: str
    payload: bytes

    def message(self) -> Message:
        return getattr(ev, self.message_type).FromString(self.payload)


def enqueue(con: duckdb.DuckDBPyConnection, subject: str, msg_id: str, message: Message, now: datetime) -> None:
    con.execute(
        "INSERT INTO outbox (subject, msg_id, message_type, payload, created_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        [subject, msg_id, type(message).__name__, message.SerializeToString(), now],
    )


def pending(con: duckdb.DuckDBPyConnection) -> list[Pending]:
    rows = con.execute(
        "SELECT subject, msg_id, message_type, payload FROM outbox WHERE published_at IS NULL "
        "ORDER BY created_at, subject, msg_id"
    ).fetchall()
    return [Pending(s, m, t, bytes(p)) for s, m, t, p in rows]


def mark_published(con: duckdb.DuckDBPyConnection, subject: str, msg_id: str, now: datetime) -> None:
    con.execute(
        "UPDATE outbox SET published_at = ? WHERE subject = ? AND msg_id = ? AND published_at IS NULL",
        [now, subject, msg_id],
    )


class Outbox:
    """Publishes what the database says is owed; one flush at a time."""

    def __init__(self, db: Database, bus: Bus, clock: Callable[[], datetime], signer: Signer) -> None:
        self._db = db
        self._bus = bus
        self._clock = clock
        self._signer = signer
        self._lock = asyncio.Lock()

    async def flush(self) -> int:
        async with self._lock:
            owed = await self._db.write(pending)
            for item in owed:
                message = item.message()
                if isinstance(message, ev.KernelPromoted | ev.KernelDemoted):
                    self._signer.sign(message)  # deterministic: a republished one is byte-identical
                fresh = await self._bus.publish(item.subject, message, msg_id=item.msg_id)
                await self._db.write(mark_published, item.subject, item.msg_id, self._clock())
                log.info("published", subject=item.subject, msg_id=item.msg_id, duplicate=not fresh)
            return len(owed)
