"""registry.experience over the real bus: what earlier campaigns won, most similar first."""

from __future__ import annotations

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from tests.registry.conftest import RunningRegistry
from tests.registry.helpers import benchmark, candidate, verdict, wait_sql


async def ask(bus: Bus, **fields) -> ev.ExperienceReply:
    return await bus.request(subjects.REGISTRY_EXPERIENCE, ev.ExperienceRequest(**fields), ev.ExperienceReply)


async def test_winners_of_earlier_campaigns_most_similar_first_failures_and_losers_left_out(
    registry: RunningRegistry, bus: Bus
) -> None:
    won, lost, failed, other_hw, mine = (candidate(n, campaign_id=f"c{n}") for n in range(1, 6))
    rope = candidate(6, slot="rope", campaign_id="c6")
    results = {
        won.candidate_id: benchmark(won, speedup_lo=1.2, vs_reference=1.3),
        lost.candidate_id: benchmark(lost, speedup_lo=0.8, vs_reference=0.8),
        failed.candidate_id: benchmark(failed, speedup_lo=1.5, vs_reference=1.6),
        other_hw.candidate_id: benchmark(other_hw, speedup_lo=1.9, vs_reference=2.0),
        mine.candidate_id: benchmark(mine, speedup_lo=1.4, vs_reference=1.4),
        rope.candidate_id: benchmark(rope, speedup_lo=1.1, vs_reference=1.1),
    }
    results[other_hw.candidate_id].hardware = "NVIDIA H100 80GB HBM3"
    for c in (won, lost, failed, other_hw, mine, rope):
        await bus.publish(subjects.CANDIDATES_PROPOSED, c, msg_id=c.candidate_id)
        await bus.publish(subjects.CANDIDATES_BENCHMARKED, results[c.candidate_id], msg_id=c.candidate_id)
    await bus.publish(subjects.CANDIDATES_VERIFIED, verdict(failed, passed=False, stage="end_to_end"),
                      msg_id=failed.candidate_id)
    await bus.publish(subjects.CANDIDATES_VERIFIED, verdict(won), msg_id=won.candidate_id)
    await wait_sql(bus, "SELECT count(*) FROM benchmarks", "6")
    await wait_sql(bus, "SELECT count(*) FROM verdicts WHERE decision IS NOT NULL", "2")

    reply = await ask(bus, model="llama-tiny", hardware="cpu-test", slots=["rmsnorm", "rope"],
                      exclude_campaign="c5")
    assert not reply.error
    by_slot = {}
    for item in reply.items:
        by_slot.setdefault(item.slot, []).append(item)
    # same hardware before a faster win on other hardware; losers, the failed and the asker's own left out
    assert [i.candidate_id for i in by_slot["rmsnorm"]] == [won.candidate_id, other_hw.candidate_id]
    first = by_slot["rmsnorm"][0]
    assert first.verified and first.promoted and dict(first.params) == {"variant": "1"}
    assert first.speedup > 1.2 and first.hardware == "cpu-test" and first.campaign_id == "c1"
    assert [i.candidate_id for i in by_slot["rope"]] == [rope.candidate_id]

    on_h100 = await ask(bus, model="llama-tiny", hardware="NVIDIA H100 80GB HBM3", slots=["rmsnorm"], per_slot=1)
    assert [i.candidate_id for i in on_h100.items] == [other_hw.candidate_id]
    assert "name its slots" in (await ask(bus, model="llama-tiny")).error
    assert "positive" in (await ask(bus, slots=["rope"], per_slot=-1)).error
