"""What the CLI asks the registry to show progress: one place for the SQL the views answer."""

from __future__ import annotations

from dataclasses import dataclass

from services.console import client, tables

# `slot_summary`, `campaign_overview` and `leaderboard` are views the registry's migrations create
# (services/registry/views.py documents their columns).
PER_SLOT = """
select slot, candidates, benchmarked, wins, verified, passed, promoted, best_speedup
from slot_summary order by slot
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

    @property
    def totals(self) -> dict[str, int]:
        keys = ("candidates", "benchmarked", "wins", "verified", "passed", "promoted")
        return {k: sum(int(r[k] or 0) for r in self.per_slot) for k in keys}

    @property
    def all_campaigns_done(self) -> bool:
        return bool(self.campaigns) and all(c["state"] in ("completed", "failed") for c in self.campaigns)


async def _rows(url: str, query: str) -> list[dict[str, str | None]]:
    reply = await client.sql(url, query, max_rows=10_000)
    if reply.error:
        raise client.StackUnavailable(f"registry query failed: {reply.error}")
    return tables.rows(reply)


async def snapshot(url: str) -> Snapshot:
    pending = await _rows(url, PENDING_VERIFICATION)
    return Snapshot(
        per_slot=await _rows(url, PER_SLOT),
        campaigns=await _rows(url, CAMPAIGNS),
        promoted=await _rows(url, PROMOTED),
        pending_verification=int(pending[0]["pending"] or 0) if pending else 0,
    )
