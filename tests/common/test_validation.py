"""What the bus refuses before any handler: oversized fields anywhere in a message, and events that do
not carry what their type must."""

from __future__ import annotations

import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import validation
from services.common.slot_specs import candidate_id

SRC = "def kernel(x):\n    return x\n"
GOOD = [
    ev.Candidate(candidate_id=candidate_id("rope", SRC), slot="rope", source=SRC),
    ev.Campaign(campaign_id="m-0123456789abcdef", model="llama-tiny", slots=["rope"], budget=4),
    ev.DriftEvent(drift_id="drift-3", changes=[ev.MetricChange(metric="prompt_tokens", before=1, after=3)]),
    ev.BenchmarkResult(candidate_id="0123456789abcdef", status=ev.BENCH_STATUS_OK),
    ev.BoardNote(note_id="n1", campaign_id="m-1", text="rope: plateau"),
    ev.KernelDemoted(candidate_id="0123456789abcdef", slot="attn_block"),
]


@pytest.mark.parametrize("message", GOOD, ids=lambda m: type(m).__name__)
def test_real_events_pass(message) -> None:
    validation.check(message)


@pytest.mark.parametrize("message, why", [
    (ev.Candidate(candidate_id="abc", slot="rope", source=SRC), "not a valid id"),
    (ev.Candidate(candidate_id="0123456789abcdef", slot="warp_drive", source=SRC), "known slot"),
    (ev.Campaign(campaign_id="select 1"), "not a valid id"),
    (ev.Campaign(campaign_id="c1", model="m", slots=["rope"]), "budget"),
    (ev.Campaign(campaign_id="c1", model="m", slots=["nope"], budget=3), "unknown slots"),
    (ev.DriftEvent(drift_id="d1"), "no change"),
    (ev.Verdict(candidate_id="0123456789abcdef"), "no status"),
    (ev.BoardNote(note_id="n1", campaign_id="c1"), "no text"),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_meaningless_events_are_refused(message, why: str) -> None:
    with pytest.raises(validation.Invalid, match=why):
        validation.check(message)


def test_oversized_fields_are_refused_wherever_they_sit() -> None:
    with pytest.raises(validation.TooLarge, match=r"Campaign.model is 900000 characters"):
        validation.check(ev.Campaign(campaign_id="c", model="m" * 900_000))
    nested = ev.Verdict(candidate_id="0123456789abcdef", status=ev.VERDICT_STATUS_PASSED,
                        checks=[ev.CheckResult(stage="random", detail="d" * 20_000)])
    with pytest.raises(validation.TooLarge, match=r"Verdict.checks.detail"):
        validation.check(nested)
    with pytest.raises(validation.TooLarge, match=r"params\[key\]"):
        validation.check(ev.Candidate(params={"k" * 300: "v"}))
    with pytest.raises(validation.TooLarge, match="entries"):
        validation.check(ev.Campaign(campaign_id="c", slots=["rope"] * 5000))
    validation.check_sizes(ev.Candidate(source="x" * 200_000))  # a real kernel's source is large
