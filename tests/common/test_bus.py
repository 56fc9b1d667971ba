"""The bus against a real nats-server: ack, retry, poison, malformed payloads, request/reply."""

from __future__ import annotations

import asyncio

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus, Delivery, Poison
from services.common.slot_specs import candidate_id
from tests.helpers import wait_for


def _cand(name: str) -> ev.Candidate:
    """A valid Candidate (the bus refuses invalid ones before handlers see them), told apart by `agent`."""
    source = f"# {name}\n"
    return ev.Candidate(candidate_id=candidate_id("rmsnorm", source), slot="rmsnorm", source=source, agent=name)


async def test_publish_consume_and_dedup(bus: Bus) -> None:
    seen: list[str] = []

    async def handler(msg: ev.Candidate, delivery: Delivery) -> None:
        seen.append(msg.agent)

    await bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, handler, durable="t1")
    assert await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("a"), msg_id="a")
    # the same id again is a duplicate in the stream's window: never delivered twice
    assert not await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("a"), msg_id="a")
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("b"), msg_id="b")
    await wait_for(lambda: len(seen) == 2)
    await asyncio.sleep(0.3)
    assert seen == ["a", "b"]


async def test_retry_then_success_and_poison_terminated(bus: Bus) -> None:
    attempts: dict[str, int] = {}

    async def handler(msg: ev.Candidate, delivery: Delivery) -> None:
        attempts[msg.agent] = delivery.num_delivered
        if msg.agent == "flaky" and delivery.num_delivered < 2:
            raise RuntimeError("transient")
        if msg.agent == "bad":
            raise Poison("never valid")

    await bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, handler, durable="t2")
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("flaky"))
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("bad"))
    await wait_for(lambda: attempts.get("flaky") == 2, timeout_s=15)
    await asyncio.sleep(1.5)
    assert attempts["bad"] == 1  # terminated, not redelivered
    info = await bus.js.consumer_info(subjects.stream_for(subjects.CANDIDATES_PROPOSED), "t2")
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_malformed_payload_is_terminated(bus: Bus) -> None:
    seen: list[str] = []

    async def handler(msg: ev.Candidate, delivery: Delivery) -> None:
        seen.append(msg.agent)

    await bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, handler, durable="t3")
    await bus.js.publish(subjects.CANDIDATES_PROPOSED, b"\xff\x00garbage")
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("ok"))
    await wait_for(lambda: seen == ["ok"])
    await asyncio.sleep(0.5)
    info = await bus.js.consumer_info(subjects.stream_for(subjects.CANDIDATES_PROPOSED), "t3")
    assert info.num_redelivered == 0 and info.num_ack_pending == 0


async def test_request_reply_errors_come_back_as_replies(bus: Bus) -> None:
    async def handler(req: ev.SqlRequest) -> ev.SqlReply:
        if req.query == "boom":
            raise ValueError("bad query")
        return ev.SqlReply(columns=["q"], rows=[ev.SqlRow(values=[req.query])])

    await bus.serve("test.sql", ev.SqlRequest, ev.SqlReply, handler)
    ok = await bus.request("test.sql", ev.SqlRequest(query="select 1"), ev.SqlReply)
    assert ok.rows[0].values == ["select 1"]
    bad = await bus.request("test.sql", ev.SqlRequest(query="boom"), ev.SqlReply)
    assert "bad query" in bad.error
    raw = await bus.nc.request("test.sql", b"\xff\xff", timeout=5)
    assert "malformed" in ev.SqlReply.FromString(raw.data).error


async def test_invalid_messages_are_terminated_before_the_handler(bus: Bus) -> None:
    seen: list[str] = []

    async def handler(msg: ev.Candidate, delivery: Delivery) -> None:
        seen.append(msg.agent)

    await bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, handler, durable="t5")
    await bus.publish(subjects.CANDIDATES_PROPOSED, ev.Candidate(candidate_id="not-a-hash", slot="rmsnorm",
                                                                 source="x", agent="bad id"))
    await bus.publish(subjects.CANDIDATES_PROPOSED, ev.Candidate(candidate_id="0" * 16, slot="nope", source="x",
                                                                 agent="unknown slot"))
    huge = _cand("huge")
    huge.model = "m" * 900_000
    await bus.publish(subjects.CANDIDATES_PROPOSED, huge)
    await bus.publish(subjects.CANDIDATES_PROPOSED, _cand("ok"))
    await wait_for(lambda: seen == ["ok"])
    await asyncio.sleep(0.5)
    assert seen == ["ok"]
    info = await bus.js.consumer_info(subjects.stream_for(subjects.CANDIDATES_PROPOSED), "t5")
    assert info.num_redelivered == 0 and info.num_ack_pending == 0


async def test_serve_answers_up_to_its_concurrency_at_once_and_close_waits_for_answers(nats_url: str) -> None:
    server = await Bus.connect(nats_url, "server", manage_streams=False)
    client = await Bus.connect(nats_url, "client", manage_streams=False)
    gate = asyncio.Event()
    entered: list[str] = []

    async def handler(req: ev.SqlRequest) -> ev.SqlReply:
        entered.append(req.query)
        if req.query == "wait":
            await gate.wait()
        return ev.SqlReply(columns=[req.query])

    try:
        await server.serve("test.sql.concurrency", ev.SqlRequest, ev.SqlReply, handler, concurrency=2)
        waiting = asyncio.create_task(client.request("test.sql.concurrency", ev.SqlRequest(query="wait"), ev.SqlReply))
        await wait_for(lambda: entered == ["wait"] or waiting.done())
        assert entered == ["wait"], waiting  # a request that failed shows its exception here
        # the first is still in its handler; the second is answered anyway
        now = await client.request("test.sql.concurrency", ev.SqlRequest(query="now"), ev.SqlReply)
        assert now.columns == ["now"]
        assert not waiting.done()

        closing = asyncio.create_task(server.close())
        await asyncio.sleep(0.2)
        assert not closing.done()  # a request already taken is answered before the connection goes
        gate.set()
        assert (await waiting).columns == ["wait"]
        await closing
    finally:
        gate.set()
        await client.close()
