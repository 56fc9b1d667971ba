"""Garbage on every subject of the real stack, published with the very identity allowed to publish
there (a buggy or compromised service): each consumer terminates and logs it, none loops on it, and
the stack still answers afterwards. Any other identity cannot publish there at all."""

from __future__ import annotations

import asyncio

import nats
import pytest

from services.common import identities, subjects
from services.console import client
from tests.integration.conftest import wait_ready

pytestmark = pytest.mark.timeout(300)

DURABLE_SUBJECTS = (
    subjects.TRAFFIC_REQUESTS,
    subjects.TRAFFIC_DRIFT,
    subjects.CAMPAIGN_STARTED,
    subjects.CAMPAIGN_COMPLETED,
    subjects.CANDIDATES_PROPOSED,
    subjects.CANDIDATES_BENCHMARKED,
    subjects.CANDIDATES_VERIFIED,
    subjects.KERNEL_PROMOTED,
    subjects.KERNEL_DEMOTED,
    subjects.board("c-garbage"),
)
GARBAGE = b"\xff\xfe not a protobuf \x00\x01"


async def test_malformed_payloads_are_terminated_everywhere(stack) -> None:
    await wait_ready(stack)
    await asyncio.sleep(3)  # every service has created its consumers
    for subject in DURABLE_SUBJECTS:
        owner = await nats.connect(stack.url_for(identities.publisher_of(subject)))
        await owner.jetstream().publish(subject, GARBAGE)
        await owner.close()
    nc = await nats.connect(stack.nats_url)
    js = nc.jetstream()

    async def settled() -> list:
        consumers = []
        for stream in (st.name for st in subjects.STREAMS):
            consumers += await js.consumers_info(stream)
        return consumers

    consumers: list = []
    for _ in range(60):
        consumers = await settled()
        busy = [c.name for c in consumers if c.num_ack_pending or c.num_pending]
        if not busy:
            break
        await asyncio.sleep(1)
    await nc.close()
    assert len(consumers) >= 10, [c.name for c in consumers]
    assert [c.name for c in consumers if c.num_ack_pending or c.num_pending] == []
    assert [c.name for c in consumers if c.num_redelivered] == []

    logged = "".join(p.read_text(errors="replace") for p in stack.log_dir.glob("*.log"))
    assert logged.count("malformed") >= len(DURABLE_SUBJECTS)

    reply = await client.sql(stack.nats_url, "select count(*) as n from candidates")
    assert not reply.error and reply.rows[0].values == ["0"]
    refused = await client.sql(stack.nats_url, "drop table candidates")
    assert "read-only" in refused.error
