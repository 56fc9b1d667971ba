"""A thin typed layer over nats-py: protobuf payloads, durable JetStream consumers, request/reply.

Handler contract for `Bus.consume`:
- returns normally            → the message is acked;
- raises `Poison`             → the message is terminated (never redelivered) and logged;
- raises any other exception  → nak with an exponential backoff; JetStream stops after max_deliver.
A payload that does not decode as the subject's message type, has a field past its size limit or lacks
what its type must carry (services/common/validation.py) is terminated and logged before any handler
sees it.
Handlers must be idempotent: JetStream delivers at least once. Every outcome is counted (metrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from services.common import metrics, subjects, tls, validation
from services.common.log import get_logger

M = TypeVar("M", bound=Message)
R = TypeVar("R", bound=Message)

log = get_logger("bus")


class Poison(Exception):
    """The message can never be handled: terminate it instead of redelivering."""


@dataclass(frozen=True)
class Delivery:
    subject: str
    stream_seq: int
    num_delivered: int


Handler = Callable[[M, Delivery], Awaitable[None]]


def _has_unknown_fields(message: Message) -> bool:
    return len(UnknownFieldSet(message)) > 0


def parse(msg_type: type[M], data: bytes, *, bounded: bool = True) -> M:
    """Decode `data`; Poison when it is not a `msg_type` or (`bounded`) is not a valid one.
    Replies to our own requests (SQL result sets) are not checked: they are ours, not the bus's."""
    message = msg_type()
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError) as exc:
        raise Poison(f"malformed {msg_type.__name__}: {exc}") from exc
    if _has_unknown_fields(message):
        raise Poison(f"malformed {msg_type.__name__}: fields this version does not know")
    if bounded:
        try:
            validation.check(message)
        except validation.Invalid as exc:
            raise Poison(f"refused {msg_type.__name__}: {exc}") from exc
    return message


class Bus:
    def __init__(self, nc: Client, name: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.name = name
        self._tasks: list[asyncio.Task] = []
        self._pull_subs: list[JetStreamContext.PullSubscription] = []
        self._served: list[Subscription] = []
        self._answering: set[asyncio.Task] = set()
        self._stopping = asyncio.Event()

    @classmethod
    async def connect(cls, url: str, name: str, *, manage_streams: bool = True) -> Bus:
        """Connect (credentials ride in the URL: nats://user:password@host:port). `manage_streams`:
        create or update the streams; identities that only publish (traffic) leave that to services."""
        async def on_error(exc: Exception) -> None:
            log.warning("nats error", service=name, error=str(exc))

        nc = await nats.connect(
            url,
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=on_error,
            **tls.nats_options(),
        )
        bus = cls(nc, name)
        if manage_streams:
            await bus.ensure_streams()
        return bus

    async def ensure_streams(self) -> None:
        for stream in subjects.STREAMS:
            config = StreamConfig(
                name=stream.name,
                subjects=list(stream.subjects),
                storage=StorageType.FILE,
                max_bytes=stream.max_bytes,
                max_age=stream.max_age_s,
                duplicate_window=300.0,
            )
            try:
                await self.js.stream_info(stream.name)
                await self.js.update_stream(config)
            except NotFoundError:
                try:
                    await self.js.add_stream(config)
                except BadRequestError:  # another service created it meanwhile
                    await self.js.stream_info(stream.name)

    # -- publishing -------------------------------------------------------------------------
    async def publish(self, subject: str, message: Message, *, msg_id: str | None = None) -> bool:
        """Durable publish. `msg_id` de-duplicates within the stream's window; returns False on a dup."""
        headers = {"Nats-Msg-Id": f"{subject}:{msg_id}"} if msg_id else None
        ack = await self.js.publish(subject, message.SerializeToString(), headers=headers)
        metrics.BUS_PUBLISHED.labels(ack.stream, str(bool(ack.duplicate)).lower()).inc()
        return not ack.duplicate

    async def publish_core(self, subject: str, message: Message) -> None:
        await self.nc.publish(subject, message.SerializeToString())

    # -- consuming --------------------------------------------------------------------------
    async def consume(
        self,
        subject: str,
        msg_type: type[M],
        handler: Handler[M],
        *,
        durable: str,
        max_deliver: int = 6,
        ack_wait_s: float = 30.0,
        batch: int = 16,
        deliver_new: bool = False,
    ) -> None:
        """Start a durable pull consumer. Processes sharing `durable` split the work (queue group)."""
        config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ack_wait_s,
            max_deliver=max_deliver,
            deliver_policy=DeliverPolicy.NEW if deliver_new else DeliverPolicy.ALL,
            filter_subject=subject,
        )
        sub = await self.js.pull_subscribe(subject, durable=durable, config=config)
        self._pull_subs.append(sub)
        task = asyncio.create_task(self._pull_loop(sub, msg_type, handler, ack_wait_s, batch, durable, subject))
        self._tasks.append(task)

    async def _pull_loop(self, sub, msg_type, handler, ack_wait_s, batch, durable, subject) -> None:
        while not self._stopping.is_set():
            try:
                msgs = await sub.fetch(batch, timeout=1.0)
            except (TimeoutError, nats.errors.TimeoutError):  # nothing to fetch (or a busy loop)
                continue
            except (nats.errors.ConnectionClosedError, asyncio.CancelledError):
                return
            except Exception as exc:  # reconnecting: keep trying
                if self._stopping.is_set():
                    return
                log.warning("fetch failed", durable=durable, error=f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                if self._stopping.is_set():
                    await msg.nak()
                    continue
                await self._handle(msg, msg_type, handler, ack_wait_s, durable, subject)

    async def _handle(self, msg: Msg, msg_type, handler, ack_wait_s: float, durable: str, consumed: str) -> None:
        """`consumed`: the consumer's filter subject, the metrics' label (board.> for every board.<id>)."""
        meta = msg.metadata
        delivery = Delivery(msg.subject, meta.sequence.stream, meta.num_delivered)
        labels = (consumed, durable)
        metrics.BUS_PENDING.labels(*labels).set(meta.num_pending)
        if delivery.num_delivered > 1:
            metrics.BUS_REDELIVERED.labels(*labels).inc()
        keepalive = asyncio.create_task(_keep_in_progress(msg, ack_wait_s / 3))
        started = time.monotonic()
        try:
            message = parse(msg_type, msg.data)
            await handler(message, delivery)
        except Poison as exc:
            _count(labels, started, "poison")
            log.error("message terminated", subject=msg.subject, seq=delivery.stream_seq,
                      consumer=durable, reason=str(exc))
            await msg.term()
        except Exception as exc:
            _count(labels, started, "retry")
            delay = min(2.0 ** delivery.num_delivered, 30.0)
            log.warning("handler failed; will retry", subject=msg.subject, seq=delivery.stream_seq,
                        consumer=durable, attempt=delivery.num_delivered, retry_in_s=delay,
                        error=f"{type(exc).__name__}: {exc}")
            await msg.nak(delay=delay)
        else:
            _count(labels, started, "handled")
            await msg.ack()
        finally:
            keepalive.cancel()

    async def subscribe(
        self, subject: str, msg_type: type[M], handler: Callable[[M], Awaitable[None]], *, queue: str = ""
    ) -> None:
        """Core (non-durable) subscription, for live views such as progress displays."""

        async def on_msg(msg: Msg) -> None:
            try:
                await handler(parse(msg_type, msg.data))
            except Poison as exc:
                metrics.BUS_MESSAGES.labels(subject, "", "poison").inc()
                log.error("malformed message ignored", subject=msg.subject, reason=str(exc))
            else:
                metrics.BUS_MESSAGES.labels(subject, "", "handled").inc()

        await self.nc.subscribe(subject, queue=queue, cb=on_msg)
        await self.nc.flush()  # the server holds the interest once this returns

    # -- request / reply --------------------------------------------------------------------
    async def serve(
        self,
        subject: str,
        request_type: type[M],
        reply_type: type[R],
        handler: Callable[[M], Awaitable[R]],
        *,
        queue: str = "",
        concurrency: int = 1,
    ) -> None:
        """Answer requests; errors travel back as a reply with its `error` field set. Up to
        `concurrency` requests are answered at once, each in a task of its own (nats-py runs one
        callback per subscription at a time); the next waits until one of them has answered."""
        slots = asyncio.Semaphore(concurrency)

        async def reply_to(msg: Msg) -> R:
            outcome = "ok"
            try:
                return await handler(parse(request_type, msg.data))
            except Poison as exc:
                outcome = "malformed"
                log.error("malformed request", subject=subject, reason=str(exc))
                return _error_reply(reply_type, str(exc))
            except Exception as exc:
                outcome = "error"
                log.exception("request failed", subject=subject)
                return _error_reply(reply_type, f"{type(exc).__name__}: {exc}")
            finally:
                metrics.BUS_REQUESTS.labels(subject, outcome).inc()

        async def answer(msg: Msg) -> None:
            try:
                reply = await reply_to(msg)
                if msg.reply:
                    await msg.respond(reply.SerializeToString())
            except Exception as exc:  # the connection went away: the requester times out
                log.warning("reply not sent", subject=subject, error=f"{type(exc).__name__}: {exc}")
            finally:
                slots.release()

        async def on_request(msg: Msg) -> None:
            await slots.acquire()
            task = asyncio.create_task(answer(msg))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

        self._served.append(await self.nc.subscribe(subject, queue=queue or subject, cb=on_request))
        # the server holds the interest once this returns: a request sent right after a (re)start by
        # another connection finds a responder instead of failing with NoResponders
        await self.nc.flush()

    async def request(
        self, subject: str, message: Message, reply_type: type[R], timeout_s: float = 10.0
    ) -> R:
        reply = await self.nc.request(subject, message.SerializeToString(), timeout=timeout_s)
        return parse(reply_type, reply.data, bounded=False)

    # -- lifecycle --------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop fetching, let in-flight handlers finish and requests already here be answered, then
        drain the connection."""
        self._stopping.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=30)
        for task in self._tasks:
            task.cancel()
        # A pull subscription's inbox never drains by itself (nats-py waits out its 30 s timeout).
        for sub in self._pull_subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        drains = [asyncio.wait_for(sub.drain(), timeout=30) for sub in self._served]
        await asyncio.gather(*drains, return_exceptions=True)
        if self._answering:  # answers still on their way need the connection open
            await asyncio.wait(self._answering, timeout=30)
        with contextlib.suppress(Exception):
            await self.nc.drain()


def _count(labels: tuple[str, str], started: float, outcome: str) -> None:
    metrics.BUS_HANDLER_SECONDS.labels(*labels).observe(time.monotonic() - started)
    metrics.BUS_MESSAGES.labels(*labels, outcome).inc()


def _error_reply(reply_type: type[R], error: str) -> R:
    """The reply type's own way to say no: its `error` field, or (a Campaign) its stop_reason."""
    reply = reply_type()
    fields = reply.DESCRIPTOR.fields_by_name
    for name in ("error", "stop_reason"):
        if name in fields:
            setattr(reply, name, error)
            break
    return reply


async def _keep_in_progress(msg: Msg, every_s: float) -> None:
    """Long handlers (a benchmark, a verification) tell JetStream they are alive."""
    while True:
        await asyncio.sleep(every_s)
        with contextlib.suppress(Exception):
            await msg.in_progress()
