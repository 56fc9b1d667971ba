"""What the CLI asks the registry to show progress: one place for the SQL the views answer."""

from __future__ import annotations

from dataclasses import dataclass

import nats

from services.common import subjects, tls
from services.console import client, tables

# `slot_summary`, `campaign_overview` and `leaderboard` are views the registry's migrations create
# (services/registry/views.py documents their columns).
# step_share / headroom: the slot's share of the live step's time when its newest campaign started,
# and the part of it above the slot's memory floor (aim.py)
PER_SLOT = """
with latest as (
    select p.slot, p.share, p.headroom from step_profiles p join campaigns c using (campaign_id)
    qualify row_number() over (partition by p.slot order by c.started_unix desc) = 1)
select s.slot, candidates, benchmarked, wins, verified, passed, promoted, best_speedup, l.share as step_share,
    l.headroom
from slot_summary s left join latest l using (slot) order by s.slot
"""

CAMPAIGNS = "select campaign_id, state, stop_reason, proposed from campaign_overview order by started_unix"

PROMOTED = """
select candidate_id, slot, speedup, speedup_vs_reference from leaderboard order by promoted_at
"""

PENDING_VERIFICATION = """
select count(*) as pending from benchmarks b
where b.status = 'ok' and b.speedup_lo > 1.0
  and not exists (select 1 from verdicts v where v.candidate_id = b.candidate_id)
"""


@dataclass
class Snapshot:
    per_slot: list[dict[str, str | None]]
    campaigns: list[dict[str, str | None]]
    promoted: list[dict[str, str | None]]
    pending_verification: int
    registry_backlog: int = 0  # messages the registry's consumers have not yet stored (delivered or not)

    @property
    def totals(self) -> dict[str, int]:
        keys = ("candidates", "benchmarked", "wins", "verified", "passed", "promoted")
        return {k: sum(int(r[k] or 0) for r in self.per_slot) for k in keys}

    @property
    def all_campaigns_done(self) -> bool:
        return bool(self.campaigns) and all(c["state"] in ("completed", "failed") for c in self.campaigns)

    @property
    def settled(self) -> bool:
        """Every campaign ended, no winner awaits its verdict and the registry has stored all it was sent."""
        return self.all_campaigns_done and self.pending_verification == 0 and self.registry_backlog == 0


async def _rows(url: str, query: str) -> list[dict[str, str | None]]:
    reply = await client.sql(url, query, max_rows=10_000)
    if reply.error:
        raise client.StackUnavailable(f"registry query failed: {reply.error}")
    return tables.rows(reply)


async def registry_backlog(url: str) -> int:
    """Messages in the streams that the registry's durable consumers have not acknowledged yet: a
    redelivery after a restart can still be on its way when a campaign already reads `completed`."""
    try:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, **tls.nats_options())
    except Exception as exc:
        raise client.StackUnavailable(f"cannot reach NATS: {exc}") from exc
    try:
        js = nc.jetstream()
        backlog = 0
        for stream in subjects.STREAMS:
            for info in await js.consumers_info(stream.name):
                if info.name.startswith("registry-"):
                    backlog += (info.num_pending or 0) + (info.num_ack_pending or 0)
        return backlog
    except Exception as exc:
        raise client.StackUnavailable(f"cannot read the registry's consumers: {exc}") from exc
    finally:
        await nc.close()


async def snapshot(url: str) -> Snapshot:
    pending = await _rows(url, PENDING_VERIFICATION)
    return Snapshot(
        per_slot=await _rows(url, PER_SLOT),
        campaigns=await _rows(url, CAMPAIGNS),
        promoted=await _rows(url, PROMOTED),
        pending_verification=int(pending[0]["pending"] or 0) if pending else 0,
        registry_backlog=await registry_backlog(url),
    )
