"""A SIGKILLed agent pool resumes its campaign from the KV bucket: it completes, nothing proposed twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from tests.agent_pool.conftest import Collector, FakeEngine, drift, env_for, result, wait_for

REPO = Path(__file__).resolve().parents[2]
SETTINGS = {"campaign_budget": 10, "agent_in_flight": 3, "agent_slots": "rmsnorm,silu_mul,rope", "agent_plateau": 50}


async def test_sigkill_mid_campaign_then_restart_completes_without_duplicates(
    bus: Bus, nats_url: str, tmp_path: Path, pool
) -> None:
    completed = await Collector.on(bus, subjects.CAMPAIGN_COMPLETED, ev.Campaign, "t-completed")
    started = await Collector.on(bus, subjects.CAMPAIGN_STARTED, ev.Campaign, "t-started")
    engine = await FakeEngine(bus).start()
    log = open(tmp_path / "agent_pool.log", "wb")  # noqa: SIM115 - the child's output, closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.agent_pool"],
        env={**os.environ, **env_for(nats_url, tmp_path / "data", **SETTINGS)},
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-kill"), msg_id="drift-kill")
        await wait_for(lambda: len(engine.candidates) == 3, timeout_s=60, what="first proposals")
        for c in engine.candidates[:2]:
            await engine.answer(c, 1.2)
        await wait_for(lambda: len(engine.candidates) == 5, what="proposals after feedback")
        proc.send_signal(signal.SIGKILL)  # no drain, no goodbye
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()

    # results that arrive while the pool is down wait in its durable consumer
    for c in engine.candidates[2:4]:
        await engine.answer(c, 0.8)
    before = len(engine.candidates)
    engine.score = lambda c: result(c, 1.0)  # from now on the engine answers at once
    restarted = await pool(**SETTINGS)
    for c in engine.candidates[4:before]:
        await engine.answer(c, 1.0)
    await wait_for(lambda: bool(completed.items), what="completion after restart")
    campaign = completed.items[0]
    ids = [c.candidate_id for c in engine.candidates]
    assert len(ids) == len(set(ids)) == campaign.proposed == 10 > before
    assert campaign.stop_reason == "budget" and campaign.trigger == "drift-kill"
    assert len(started.items) == 1  # resumed, not started again
    assert len(completed.items) == 1
    # what the killed pool learned came back from the board's history
    assert any("new best" in n.text for slot in SETTINGS["agent_slots"].split(",")
               for n in restarted.board.notes(slot) if n.text.startswith(f"{slot}: 1.200x"))
