"""Does a flood of garbage on the bus slow the loop down afterwards? Two fresh embedded stacks run the
same campaign (same seed, so the same candidates); the second first takes 2,100 garbage messages on
every durable and request subject (tests/integration/flood.py) and drains them. Prints a table and updates the
`bus-flood` section of BENCHMARKS.md.

    .venv/bin/python benchmarks/bus_flood.py [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import nats  # noqa: E402

from benchmarks.markdown import update_section  # noqa: E402
from proto.gen.polymorph.v1 import events_pb2 as ev  # noqa: E402
from services.common import subjects  # noqa: E402
from services.console import client  # noqa: E402
from services.console.stack import Stack  # noqa: E402
from tests.integration.conftest import STACK_ENV, wait_campaigns_settled, wait_ready  # noqa: E402
from tests.integration.flood import flood_durable_subjects, flood_requests  # noqa: E402

CAMPAIGN = ev.StartCampaignRequest(model="llama-tiny", slots=["rmsnorm"], budget=6)


async def _drained(stack: Stack) -> None:
    nc = await nats.connect(stack.nats_url)
    js = nc.jetstream()
    try:
        while True:
            consumers = [c for st in subjects.STREAMS for c in await js.consumers_info(st.name)]
            if not [c for c in consumers if c.num_pending or c.num_ack_pending]:
                return
            await asyncio.sleep(0.5)
    finally:
        await nc.close()


async def one_run(flood: bool, seed: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bus-flood-") as tmp:
        stack = Stack(Path(tmp) / "stack", extra_env={**STACK_ENV, "POLYMORPH_AGENT_SEED": str(seed)}, port=-1)
        stack.start()
        try:
            await wait_ready(stack)
            row: dict[str, float] = {}
            if flood:
                t = time.monotonic()
                rng = random.Random(seed)
                durable = await flood_durable_subjects(stack.url_for, rng)
                row["messages"] = durable + len(await flood_requests(stack.nats_url, rng))
                await _drained(stack)
                row["flood_drained_s"] = time.monotonic() - t
            t = time.monotonic()
            campaign = await client.start_campaign(stack.nats_url, CAMPAIGN)
            assert campaign.campaign_id, campaign.stop_reason
            snap = await wait_campaigns_settled(stack, timeout_s=900)
            row["campaign_s"] = time.monotonic() - t
            row["benchmarked"] = snap.totals["benchmarked"]
            return row
        finally:
            stack.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1, help="pairs of runs (before / after a flood)")
    ap.add_argument("--no-update", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    rows = []
    for i in range(args.runs):
        for flood in (False, True):
            row = asyncio.run(one_run(flood, seed=i))
            rows.append({"run": i, "flood": flood, **row})
            print(json.dumps(rows[-1]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip()
    lines = ["| run | garbage first | messages | flood drained (s) | campaign to settled (s) | benchmarked |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['run']} | {'yes' if r['flood'] else 'no'} | {int(r.get('messages', 0))} | "
                     f"{r.get('flood_drained_s', 0):.1f} | {r['campaign_s']:.1f} | {int(r['benchmarked'])} |")
    table = "\n".join(lines)
    print(table)
    if not args.no_update:
        update_section("bus-flood", f"""## The loop after a flood of garbage (CPU)

`benchmarks/bus_flood.py`, {dt.date.today().isoformat()}, commit `{commit}`, this 2-core machine. Two
fresh stacks run the same campaign ({CAMPAIGN.budget} candidates for `rmsnorm` on `llama-tiny`, same
seed); the second first takes garbage on every durable and request subject (undecodable, empty,
wrong-type and oversized messages, each with the subject's own identity) and drains it: the drain
includes the bounded wait (about 2 minutes) before results for unknown candidates are refused.

{table}""")


if __name__ == "__main__":
    main()
