"""How a campaign turns the live step's profile into its budget (services/agent_pool/aim.py)."""

from __future__ import annotations

from collections import Counter

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool import aim

DECODE = ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=1, context_len=1020, weight=0.75)
PREFILL = ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=1, context_len=1020, weight=0.25)


def reply(times: dict[str, tuple[float, float]], step_us: float,
          floors: dict[str, float] | None = None) -> es.ProfileReply:
    """times: slot -> (decode us, prefill us); floors: slot -> floor us at both shapes."""
    out = es.ProfileReply(step_us=step_us)
    for slot, (dec, pre) in times.items():
        floor = (floors or {}).get(slot, 0.0)
        out.times.append(es.SlotTime(slot=slot, shape=DECODE, median_us=dec, calls_per_step=1, floor_us=floor))
        out.times.append(es.SlotTime(slot=slot, shape=PREFILL, median_us=pre, calls_per_step=1, floor_us=floor))
    return out


def test_shares_are_weighted_over_the_shapes_and_sorted_heaviest_first() -> None:
    # step: 0.75 * 1000 + 0.25 * 9000 = 3000 us
    profile = reply({"rmsnorm": (20, 100), "linear": (600, 6000), "attention": (200, 2400)}, step_us=3000)
    shares = aim.step_shares(profile, ["rmsnorm", "attention", "linear", "rope"])
    assert [s.slot for s in shares] == ["linear", "attention", "rmsnorm"]  # rope: not in the profile
    by = {s.slot: s for s in shares}
    assert abs(by["linear"].us_per_step - (0.75 * 600 + 0.25 * 6000)) < 1e-9
    assert abs(by["linear"].share - 1950 / 3000) < 1e-9 and abs(by["rmsnorm"].share - 40 / 3000) < 1e-9


def test_the_budget_follows_the_shares_and_every_slot_gets_some() -> None:
    shares = aim.step_shares(reply({"linear": (600, 600), "attention": (300, 300), "rmsnorm": (1, 1)}, 1000),
                             ["rmsnorm", "attention", "linear", "rope"])
    weight = aim.weights(shares, ["rmsnorm", "attention", "linear", "rope"])
    assert weight["rmsnorm"] == weight["rope"] == aim.MIN_SHARE  # tiny and unnamed: the floor, never zero
    counts: Counter[str] = Counter()
    order = []
    for _ in range(60):
        slot = aim.next_slot(["rmsnorm", "attention", "linear", "rope"], counts, weight)
        counts[slot] += 1
        order.append(slot)
    assert order[:3] == ["linear", "linear", "attention"]  # the heaviest first (ties: the heavier)
    assert 1.7 < counts["linear"] / counts["attention"] < 2.3  # twice the time at stake, twice the candidates
    assert counts["rmsnorm"] >= 1 and counts["rope"] >= 1


def test_without_a_profile_the_budget_is_shared_evenly_in_campaign_order() -> None:
    weight = aim.weights([], ["rope", "rmsnorm", "linear"])
    counts: Counter[str] = Counter()
    order = []
    for _ in range(6):
        slot = aim.next_slot(["rope", "rmsnorm", "linear"], counts, weight)
        counts[slot] += 1
        order.append(slot)
    assert order == ["rope", "rmsnorm", "linear"] * 2


def test_the_budget_follows_the_headroom_above_each_slots_floor() -> None:
    # the batch-1 step as measured on an H100: linear holds the most time, but most of it is its floor
    profile = reply({"linear": (1063, 1063), "rope": (466, 466), "rmsnorm": (217, 217)}, 2869,
                    floors={"linear": 830.0, "rope": 2.0, "rmsnorm": 2.5})
    shares = aim.step_shares(profile, ["linear", "rope", "rmsnorm"])
    by = {s.slot: s for s in shares}
    assert by["linear"].share > by["rope"].share and by["linear"].headroom < by["rope"].headroom
    assert abs(by["linear"].headroom - (1063 - 830) / 2869) < 1e-9 and abs(by["linear"].floor_us - 830) < 1e-9
    assert [s.slot for s in shares] == ["rope", "linear", "rmsnorm"]  # the most to win first
    weight = aim.weights(shares, ["linear", "rope", "rmsnorm"])
    assert weight["rope"] > weight["linear"] > weight["rmsnorm"]
    # a floor above the measured time (a loose estimate) leaves no headroom, never a negative one
    over = aim.step_shares(reply({"sample": (10, 10)}, 100, floors={"sample": 50.0}), ["sample"])
    assert over[0].headroom == 0.0
