"""Campaigns over a real nats-server: drift start, feedback, steering, stop rules, board, bad input."""

from __future__ import annotations

import asyncio

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool import library
from services.agent_pool.agents.search import distance
from services.common import subjects
from services.common.bus import Bus
from tests.agent_pool.conftest import BUCKETS, Collector, FakeEngine, drift, result, wait_for
from tests.helpers import consumer_info


async def test_drift_starts_one_campaign_that_completes_on_budget(bus: Bus, pool) -> None:
    await pool(campaign_budget=8, agent_in_flight=3, agent_slots="rmsnorm,silu_mul,rope,attention")
    started = await Collector.on(bus, subjects.CAMPAIGN_STARTED, ev.Campaign, "t-started")
    completed = await Collector.on(bus, subjects.CAMPAIGN_COMPLETED, ev.Campaign, "t-completed")
    notes = await Collector.on(bus, f"{subjects.BOARD_PREFIX}.>", ev.BoardNote, "t-board")
    engine = await FakeEngine(bus).start()

    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-1"), msg_id="drift-1")
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-1"))  # redelivered drift: same campaign
    await wait_for(lambda: len(engine.candidates) == 3, what="first proposals")
    await asyncio.sleep(0.5)
    assert len(engine.candidates) == 3  # never more than in_flight without feedback

    answered: set[str] = set()
    while not completed.items:
        for i, c in enumerate(list(engine.candidates)):
            if c.candidate_id not in answered:
                answered.add(c.candidate_id)
                failing = i == 1  # one failure, to be reported on the board with its reason
                await bus.publish(
                    subjects.CANDIDATES_BENCHMARKED,
                    result(c, 0.0, ev.BENCH_STATUS_RAISED, "RuntimeError: boom") if failing
                    else result(c, 1.0 + 0.1 * i),
                    msg_id=c.candidate_id,
                )
        await asyncio.sleep(0.05)

    campaign = completed.items[0]
    assert campaign.state == ev.CAMPAIGN_STATE_COMPLETED and campaign.stop_reason == "budget"
    assert campaign.trigger == "drift-1" and campaign.proposed == 8 == len(engine.candidates)
    assert len(started.items) == 1 and started.items[0].campaign_id == campaign.campaign_id
    # the fake engine's address answers nothing: the campaign says why its budget was shared evenly
    assert campaign.profile_error.startswith("profile failed: UNAVAILABLE") and not campaign.step_shares
    ids = [c.candidate_id for c in engine.candidates]
    assert len(set(ids)) == 8
    assert len({c.slot for c in engine.candidates}) >= 3
    for c in engine.candidates:
        assert c.campaign_id == campaign.campaign_id and c.agent == "search" and c.model == "llama-tiny"
        assert list(c.shapes) == BUCKETS and c.params and f'SLOT = "{c.slot}"' in c.source
    await wait_for(lambda: any("failed (raised)" in n.text and "boom" in n.text for n in notes.items), 5)
    texts = [n.text for n in notes.items]
    assert any("new best" in t for t in texts)
    assert sum("stopped" in t for t in texts) == 4  # a summary per slot
    assert all(n.campaign_id == campaign.campaign_id for n in notes.items)


async def test_feedback_steers_proposals_to_the_neighbours_of_a_fast_config(bus: Bus, pool) -> None:
    await pool(campaign_budget=7, agent_in_flight=1, agent_slots="rmsnorm", agent_explore=0)
    engine = await FakeEngine(bus).start()
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-steer"), msg_id="drift-steer")
    await wait_for(lambda: len(engine.candidates) == 1)
    await engine.answer(engine.candidates[0], 0.9)
    await wait_for(lambda: len(engine.candidates) == 2)
    favoured = dict(engine.candidates[1].params)
    await engine.answer(engine.candidates[1], 3.0)  # one config is much faster than anything else
    for n in range(3, 7):
        await wait_for(lambda n=n: len(engine.candidates) == n)
        await engine.answer(engine.candidates[-1], 1.0)
    later = [dict(c.params) for c in engine.candidates[2:]]
    assert all(distance(p, favoured) == 1 for p in later), (favoured, later)
    assert {c.parent_id for c in engine.candidates[2:]} == {engine.candidates[1].candidate_id}


async def test_notes_from_other_agents_on_the_board_seed_the_search(bus: Bus, pool) -> None:
    liked = {"layout": "split", "acc": "native", "backend": "torch"}
    note = ev.BoardNote(note_id="evo-1", campaign_id="older", agent="evolutionary", slot="rope",
                        text="rope: split halves in the input dtype won 1.8x", params=liked, score=1.8)
    await bus.publish(subjects.board("older"), note, msg_id="evo-1")  # before the pool even starts
    await pool(campaign_budget=3, agent_in_flight=3, agent_slots="rope", agent_explore=0)
    engine = await FakeEngine(bus).start()
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-seeded"), msg_id="drift-seeded")
    await wait_for(lambda: len(engine.candidates) == 3)
    assert dict(engine.candidates[0].params) == liked  # re-measured first, at this drift's shapes
    assert all(distance(dict(c.params), liked) == 1 for c in engine.candidates[1:])


async def test_plateau_stops_a_campaign_before_its_budget(bus: Bus, pool) -> None:
    await pool(campaign_budget=40, agent_in_flight=2, agent_plateau=2, agent_slots="silu_mul,sample")
    completed = await Collector.on(bus, subjects.CAMPAIGN_COMPLETED, ev.Campaign, "t-completed")
    engine = await FakeEngine(bus, score=lambda c: result(c, 1.0)).start()  # nothing ever improves
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-flat"), msg_id="drift-flat")
    await wait_for(lambda: bool(completed.items))
    campaign = completed.items[0]
    assert campaign.stop_reason == "plateau" and campaign.proposed == len(engine.candidates) < 12


async def test_a_per_slot_cap_stops_each_slot_on_budget(bus: Bus, pool) -> None:
    await pool(campaign_budget=40, agent_slot_budget=2, agent_plateau=50, agent_slots="silu_mul,sample")
    completed = await Collector.on(bus, subjects.CAMPAIGN_COMPLETED, ev.Campaign, "t-completed")
    engine = await FakeEngine(bus, score=lambda c: result(c, 1.0 + len(engine.candidates) / 10)).start()
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-cap"), msg_id="drift-cap")
    await wait_for(lambda: bool(completed.items))
    assert completed.items[0].stop_reason == "budget" and completed.items[0].proposed == 4
    assert sorted(c.slot for c in engine.candidates) == ["sample", "sample", "silu_mul", "silu_mul"]


async def test_malformed_payloads_are_terminated_and_the_pool_goes_on(bus: Bus, pool) -> None:
    await pool(campaign_budget=2, agent_in_flight=2, agent_slots="sample")
    engine = await FakeEngine(bus).start()
    await bus.js.publish(subjects.TRAFFIC_DRIFT, b"\xff\x00not a drift")
    await bus.js.publish(subjects.CANDIDATES_BENCHMARKED, b"\x0a\xff\xff")
    await bus.publish(subjects.TRAFFIC_DRIFT, ev.DriftEvent(t_s=1.0))  # no drift id: poison
    await bus.publish(subjects.CANDIDATES_BENCHMARKED, ev.BenchmarkResult(campaign_id="x"))  # no candidate
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-ok"), msg_id="drift-ok")
    await wait_for(lambda: len(engine.candidates) == 2)
    await asyncio.sleep(1.0)
    for durable in ("agent-pool-drift", "agent-pool-feedback"):
        info = await consumer_info(bus, durable)
        assert info.num_ack_pending == 0 and info.num_redelivered == 0 and info.num_pending == 0, durable


async def test_optimize_request_starts_a_campaign_and_rejects_unknown_slots(bus: Bus, pool) -> None:
    await pool(campaign_budget=3, agent_in_flight=3)
    engine = await FakeEngine(bus).start()
    bad = await bus.request(subjects.CAMPAIGN_START, ev.StartCampaignRequest(slots=["rmsnorm", "warp"]), ev.Campaign)
    assert bad.state == ev.CAMPAIGN_STATE_FAILED and "warp" in bad.stop_reason
    profile = ev.TrafficProfile(buckets=BUCKETS[:1])
    ok = await bus.request(
        subjects.CAMPAIGN_START, ev.StartCampaignRequest(model="llama-tiny", slots=["rope"], budget=2,
                                                         profile=profile), ev.Campaign
    )
    assert ok.state == ev.CAMPAIGN_STATE_RUNNING and ok.trigger == "manual" and ok.budget == 2
    await wait_for(lambda: len(engine.candidates) == 2)
    assert all(c.campaign_id == ok.campaign_id and list(c.shapes) == BUCKETS[:1] for c in engine.candidates)
    assert {c.slot for c in engine.candidates} == {"rope"}


async def test_requests_are_refused_with_their_reason_and_start_nothing(bus: Bus, pool) -> None:
    await pool(agent_max_campaigns=1, agent_max_budget=50, agent_discover_timeout_s=0.5, agent_in_flight=1)
    started = await Collector.on(bus, subjects.CAMPAIGN_STARTED, ev.Campaign, "t-started")

    async def ask(**fields) -> ev.Campaign:
        return await bus.request(subjects.CAMPAIGN_START, ev.StartCampaignRequest(**fields), ev.Campaign)

    no_engine = await ask(model="llama-tiny", slots=["rope"])  # nothing answers engine.discover yet
    assert no_engine.state == ev.CAMPAIGN_STATE_FAILED
    assert "no engine serves model 'llama-tiny'" in no_engine.stop_reason
    await FakeEngine(bus).start()
    assert "must name its model" in (await ask(slots=["rope"])).stop_reason  # an empty request is not a default
    assert "outside 0..50" in (await ask(model="llama-tiny", budget=51)).stop_reason
    assert "no engine serves model 'llama-3.1-8b'" in (await ask(model="llama-3.1-8b")).stop_reason
    first = await ask(model="llama-tiny", slots=["rope"], budget=5)
    assert first.state == ev.CAMPAIGN_STATE_RUNNING
    second = await ask(model="llama-tiny", slots=["rmsnorm"], budget=5)
    assert not second.campaign_id and "at most 1 at once" in second.stop_reason
    await wait_for(lambda: len(started.items) == 1)
    await asyncio.sleep(0.5)
    assert [c.campaign_id for c in started.items] == [first.campaign_id]


async def test_a_drift_for_a_model_no_engine_serves_waits_for_one(bus: Bus, pool) -> None:
    await pool(campaign_budget=2, agent_in_flight=2, agent_discover_timeout_s=0.3)
    started = await Collector.on(bus, subjects.CAMPAIGN_STARTED, ev.Campaign, "t-started")
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-other", model="llama-other"), msg_id="drift-other")
    await asyncio.sleep(1.5)
    assert started.items == []  # retried with backoff, not started
    await FakeEngine(bus, model="llama-other").start()
    await wait_for(lambda: len(started.items) == 1, timeout_s=30)
    assert started.items[0].model == "llama-other"


async def test_a_campaign_whose_steps_keep_failing_ends_failed_with_its_reason(bus: Bus, pool) -> None:
    await pool(campaign_budget=8, agent_in_flight=1, agent_step_failure_s=1.0)
    failed = await Collector.on(bus, subjects.CAMPAIGN_FAILED, ev.Campaign, "t-failed")
    engine = await FakeEngine(bus).start()
    ok = await bus.request(subjects.CAMPAIGN_START, ev.StartCampaignRequest(model="llama-tiny", slots=["rope"]),
                           ev.Campaign)
    await wait_for(lambda: len(engine.candidates) == 1)
    await bus.js.delete_key_value("agent_pool")  # its state store is gone: every step now fails
    await engine.answer(engine.candidates[0], 1.1)
    await wait_for(lambda: len(failed.items) == 1, timeout_s=60)
    assert failed.items[0].campaign_id == ok.campaign_id
    assert failed.items[0].state == ev.CAMPAIGN_STATE_FAILED
    assert "kept failing" in failed.items[0].stop_reason


async def test_drifts_during_a_campaign_queue_and_only_the_newest_runs_next(bus: Bus, pool) -> None:
    await pool(campaign_budget=2, agent_in_flight=2, agent_slots="sample")
    started = await Collector.on(bus, subjects.CAMPAIGN_STARTED, ev.Campaign, "t-started")
    completed = await Collector.on(bus, subjects.CAMPAIGN_COMPLETED, ev.Campaign, "t-completed")
    engine = await FakeEngine(bus).start()
    for drift_id in ("drift-a", "drift-b", "drift-c"):
        await bus.publish(subjects.TRAFFIC_DRIFT, drift(drift_id), msg_id=drift_id)
    await wait_for(lambda: len(engine.candidates) == 2)
    await asyncio.sleep(0.5)
    assert [c.trigger for c in started.items] == ["drift-a"]  # b and c wait behind a
    engine.score = lambda c: result(c, 1.0)
    for c in engine.candidates:
        await engine.answer(c, 1.0)
    await wait_for(lambda: len(completed.items) == 2)
    # c superseded b: the newest traffic profile is the one worth tuning for
    assert [c.trigger for c in completed.items] == ["drift-a", "drift-c"]
    assert [c.trigger for c in started.items] == ["drift-a", "drift-c"]


async def test_a_default_campaign_where_triton_runs_aims_at_the_fused_regions_too(bus: Bus, pool) -> None:
    await pool(campaign_budget=12, agent_in_flight=12, agent_triton="on", agent_aim="false")
    engine = await FakeEngine(bus).start()
    ok = await bus.request(subjects.CAMPAIGN_START, ev.StartCampaignRequest(model="llama-tiny", budget=12,
                                                                            profile=ev.TrafficProfile(buckets=BUCKETS)),
                           ev.Campaign)
    assert ok.state == ev.CAMPAIGN_STATE_RUNNING
    assert set(ok.slots) == set(library.SLOTS) | {"attn_block", "mlp_block", "layer"}
    await wait_for(lambda: len(engine.candidates) == 12)
    regions = [c for c in engine.candidates if c.slot in ("attn_block", "mlp_block", "layer")]
    assert {c.slot for c in regions} == {"attn_block", "mlp_block", "layer"}
    assert all(c.backend == ev.BACKEND_TRITON and f'REGION = "{c.slot}"' in c.source for c in regions)


async def test_a_candidate_whose_result_never_comes_is_proposed_again_and_then_answered_once(bus: Bus, pool) -> None:
    # an engine that took the delivery and never answered (JetStream gave up on it while it restarted):
    # the campaign proposes the same candidate again instead of waiting out its result timeout
    await pool(campaign_budget=1, agent_in_flight=1, agent_slots="rmsnorm", agent_republish_s=1)
    completed = await Collector.on(bus, subjects.CAMPAIGN_COMPLETED, ev.Campaign, "t-completed-again")
    engine = await FakeEngine(bus).start()
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-again"), msg_id="drift-again")
    await wait_for(lambda: len(engine.candidates) >= 2, timeout_s=60, what="the candidate proposed again")
    first, again = engine.candidates[0], engine.candidates[1]
    assert again.candidate_id == first.candidate_id and again.source == first.source
    await engine.answer(again, 1.2)
    await wait_for(lambda: bool(completed.items), timeout_s=60, what="completion")
    assert completed.items[0].proposed == 1 and completed.items[0].stop_reason == "budget"
