"""The promotion policy and the message → row helpers, without any I/O."""

from __future__ import annotations

import math

import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Poison
from services.registry import records
from services.registry.policy import ActivePromotion, BenchFacts, decide_promotion, should_demote


def facts(lo: float = 1.2, svr: float = 1.3, status: str = "ok", incumbent: str = "reference") -> BenchFacts:
    return BenchFacts(status=status, speedup=lo + 0.05, speedup_lo=lo, speedup_vs_reference=svr,
                      incumbent_id=incumbent)


def test_first_kernel_for_a_slot_needs_a_passed_verdict_ok_status_and_lo_above_one() -> None:
    assert decide_promotion("a", "passed", facts(), None).promote
    assert decide_promotion("a", "passed", facts(), None).replaces_id == ""
    assert not decide_promotion("a", "failed", facts(), None).promote
    assert not decide_promotion("a", "passed", facts(status="raised"), None).promote
    for lo in (1.0, 0.97, math.nan, math.inf):
        decision = decide_promotion("a", "passed", facts(lo=lo), None)
        assert not decision.promote, lo
    assert "noise" in decide_promotion("a", "passed", facts(lo=1.0), None).reason


def test_against_an_active_kernel_only_a_faster_one_replaces_it() -> None:
    active = ActivePromotion("old", 1.5)
    faster = decide_promotion("new", "passed", facts(svr=1.7), active)
    assert faster.promote and faster.replaces_id == "old"
    slower = decide_promotion("new", "passed", facts(svr=1.4), active)
    assert not slower.promote and "does not beat" in slower.reason
    assert not decide_promotion("new", "passed", facts(svr=1.5), active).promote  # a tie keeps the incumbent
    assert not decide_promotion("new", "passed", facts(svr=math.nan), active).promote


def test_head_to_head_measurement_against_the_active_kernel_is_trusted() -> None:
    active = ActivePromotion("old", 1.5)
    # measured directly against "old" and faster beyond the noise; its separate reference
    # measurement happens to be lower, but the direct A/B comparison is the stronger evidence
    decision = decide_promotion("new", "passed", facts(lo=1.05, svr=1.45, incumbent="old"), active)
    assert decision.promote and decision.replaces_id == "old"


def test_promotion_is_idempotent_and_demotion_needs_an_active_failure() -> None:
    assert not decide_promotion("a", "passed", facts(), ActivePromotion("a", 1.3)).promote
    assert should_demote("failed", True)
    assert not should_demote("failed", False)
    assert not should_demote("passed", True)


def test_labels_subjects_and_streams() -> None:
    assert records.label(ev.BenchStatus, ev.BENCH_STATUS_WRONG_OUTPUT) == "wrong_output"
    assert records.label(ev.Backend, ev.BACKEND_COMPILE) == "compile"
    assert records.label(ev.VerdictStatus, 99) == "unknown_99"
    assert subjects.subject_matches("board.>", "board.c1")
    assert not subjects.subject_matches("board.>", "board")
    assert subjects.subject_matches("campaigns.*", "campaigns.started")
    assert not subjects.subject_matches("traffic.drift", "traffic.drift.x")
    assert subjects.stream_for("candidates.verified") == "VERIFIED"
    assert subjects.stream_for("traffic.requests") == "TRAFFIC"
    assert subjects.stream_for("nowhere") == ""


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        (ev.DriftEvent(), "traffic.drift"),
        (ev.Campaign(), "campaigns.started"),
        (ev.Campaign(campaign_id="c"), "campaigns.paused"),  # no state and an unknown subject
        (ev.Candidate(candidate_id="x", slot="rmsnorm"), "candidates.proposed"),  # no source
        (ev.BenchmarkResult(candidate_id="x"), "candidates.benchmarked"),  # no status
        (ev.Verdict(status=ev.VERDICT_STATUS_PASSED), "candidates.verified"),
        (ev.BoardNote(text="hi"), "board.c1"),
        (ev.KernelPromoted(), "kernel.promoted"),
    ],
)
def test_messages_without_a_key_are_poison(message, subject: str) -> None:
    with pytest.raises(Poison):
        records.validate(message, subject)


def test_campaign_state_comes_from_the_message_or_its_subject() -> None:
    c = ev.Campaign(campaign_id="c")
    assert records.campaign_state(c, "campaigns.started") == "running"
    assert records.campaign_state(c, "campaigns.completed") == "completed"
    c.state = ev.CAMPAIGN_STATE_FAILED
    assert records.campaign_state(c, "campaigns.completed") == "failed"
