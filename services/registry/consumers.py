"""Durable consumers ("registry-<name>") for everything on the LOOP stream.

Per message: validate (Poison → terminated and logged), store in one transaction on the writer
thread (any other error → rollback, nak, retry), then publish what the outbox owes. The ack goes
out only after the commit, so a SIGKILL at any point loses nothing that was acked. After a commit,
/metrics shows what the tables hold (stats.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf.message import Message

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import metrics, subjects
from services.common.bus import Bus, Delivery, Poison
from services.common.signing import SignatureError, verify
from services.registry import records, stats, store
from services.registry.db import Database
from services.registry.outbox import Outbox


@dataclass(frozen=True)
class Route:
    name: str                      # durable "registry-<name>"
    subject: str
    msg_type: type[Message]
    writer: Callable[..., None]    # store.* function: (con, msg, meta)


ROUTES: tuple[Route, ...] = (
    Route("drift", subjects.TRAFFIC_DRIFT, ev.DriftEvent, store.store_drift),
    Route("campaigns", "campaigns.>", ev.Campaign, store.store_campaign),
    Route("candidates-proposed", subjects.CANDIDATES_PROPOSED, ev.Candidate, store.store_candidate),
    Route("candidates-benchmarked", subjects.CANDIDATES_BENCHMARKED, ev.BenchmarkResult, store.store_benchmark),
    Route("candidates-verified", subjects.CANDIDATES_VERIFIED, ev.Verdict, store.store_verdict),
    Route("board", f"{subjects.BOARD_PREFIX}.>", ev.BoardNote, store.store_board_note),
    # kernel.> carries two message types, hence one consumer per subject
    Route("kernel-promoted", subjects.KERNEL_PROMOTED, ev.KernelPromoted, store.store_kernel_event),
    Route("kernel-demoted", subjects.KERNEL_DEMOTED, ev.KernelDemoted, store.store_kernel_event),
)


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


async def start_consumers(bus: Bus, db: Database, box: Outbox, *, max_deliver: int, candidate_deliveries: int,
                          public_key: Ed25519PublicKey) -> None:
    counts = stats.Stats(db)
    await counts.refresh()  # what a restarted registry holds, before any message
    for route in ROUTES:
        handler = _handler(route, db, box, max_deliver, candidate_deliveries, public_key, counts)
        await bus.consume(route.subject, route.msg_type, handler, durable=f"registry-{route.name}",
                          max_deliver=max_deliver)


def _handler(route: Route, db: Database, box: Outbox, max_deliver: int, candidate_deliveries: int,
             public_key: Ed25519PublicKey, counts: stats.Stats):
    async def handle(msg: Message, delivery: Delivery) -> None:
        records.validate(msg, delivery.subject)
        if isinstance(msg, ev.KernelPromoted | ev.KernelDemoted):  # only what this registry signed is history
            try:
                verify(msg, public_key)
            except SignatureError as exc:
                metrics.KERNEL_EVENTS_REFUSED.labels(delivery.subject).inc()
                raise Poison(f"refused: {exc}") from exc
        meta = store.Meta(subject=delivery.subject, stream_seq=delivery.stream_seq, received_at=utc_now(),
                          final_attempt=max_deliver > 0 and delivery.num_delivered >= max_deliver,
                          candidate_overdue=delivery.num_delivered >= candidate_deliveries)
        await db.write(route.writer, msg, meta)
        counts.changed()
        await box.flush()

    return handle
