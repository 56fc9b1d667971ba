"""The whole loop on real parts: a promotion reaches a plain nats-py client and `polymorph sql`."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import nats
import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.console import client
from tests.integration.conftest import wait_ready

pytestmark = pytest.mark.timeout(600)


# The shapes a long-prompt phase (like the Mooncake trace's second half) asks engines to time at.
LONG_PROMPTS = ev.TrafficProfile(buckets=[
    ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=4, context_len=1024, weight=0.3),
    ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=22, context_len=512, weight=0.7),
])


def polymorph(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli", *args], capture_output=True, text=True,
                          timeout=120)


async def test_promotion_reaches_subscribers_and_sql(stack) -> None:
    await wait_ready(stack)
    nc = await nats.connect(stack.nats_url)
    promoted: asyncio.Queue[ev.KernelPromoted] = asyncio.Queue()

    async def on_promoted(msg) -> None:
        await promoted.put(ev.KernelPromoted.FromString(msg.data))

    await nc.subscribe(subjects.KERNEL_PROMOTED, cb=on_promoted)
    campaign = await client.start_campaign(stack.nats_url, ev.StartCampaignRequest(
        model="llama-tiny", slots=["rope", "rmsnorm"], budget=16, profile=LONG_PROMPTS))
    assert campaign.campaign_id
    first = await asyncio.wait_for(promoted.get(), timeout=400)
    await nc.close()
    assert first.slot in ("rope", "rmsnorm")
    assert first.speedup_lo > 1.0 and first.source

    query = f"select candidate_id, slot from promotions where candidate_id = '{first.candidate_id}'"
    found = polymorph("--nats", stack.nats_url, "sql", query, "--format", "csv")
    assert found.returncode == 0, found.stderr
    assert f"{first.candidate_id},{first.slot}" in found.stdout

    # the campaign profiled the live step first and spent its budget by each slot's share of it
    shares = polymorph("--nats", stack.nats_url, "sql", "select slot, share from step_profiles where campaign_id = "
                       f"'{campaign.campaign_id}' order by share desc", "--format", "csv")
    assert shares.returncode == 0, shares.stderr
    rows = [line.split(",") for line in shares.stdout.splitlines()[1:]]
    assert {slot for slot, _ in rows} == {"rope", "rmsnorm"} and all(0 < float(share) < 1 for _, share in rows)
    first_slot = polymorph("--nats", stack.nats_url, "sql", "select slot from candidates where campaign_id = "
                           f"'{campaign.campaign_id}' order by created_unix limit 1", "--format", "csv")
    assert first_slot.stdout.splitlines()[1] == rows[0][0]  # the heaviest slot went first
    status = polymorph("--nats", stack.nats_url, "status")
    assert status.returncode == 0 and "step share" in status.stdout, status.stdout + status.stderr

    refused = polymorph("--nats", stack.nats_url, "sql", "delete from promotions")
    assert refused.returncode == 1 and "read-only" in refused.stderr
    still = polymorph("--nats", stack.nats_url, "sql", "select count(*) as n from promotions", "--format", "csv")
    assert still.stdout.splitlines()[1] != "0"
