"""Protobuf messages → table rows: validation, natural keys, enum labels, JSON. Pure, no I/O.

A message that decodes but can never be stored (no id, an unspecified status) raises Poison: the
bus terminates it and logs why instead of redelivering it forever.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Poison

Row = dict[str, Any]


def require(msg: Message, subject: str, *fields: str) -> None:
    for field in fields:
        if not getattr(msg, field):
            raise Poison(f"{type(msg).__name__} on {subject} has no {field}: it cannot be stored")


def label(enum: Any, value: int) -> str:
    """ev.BenchStatus, 1 → 'ok': the enum name without its type prefix, lower case."""
    names = enum.keys()
    prefix = names[0].removesuffix("UNSPECIFIED")  # buf style: the zero value is *_UNSPECIFIED
    try:
        name = enum.Name(value)
    except ValueError:
        return f"unknown_{value}"
    return name.removeprefix(prefix).lower()


def message_json(msg: Message) -> str:
    return json.dumps(json_format.MessageToDict(msg, preserving_proto_field_name=True),
                      separators=(",", ":"), sort_keys=True)


def json_list(messages: Iterable[Message]) -> str:
    return json.dumps([json_format.MessageToDict(m, preserving_proto_field_name=True) for m in messages],
                      separators=(",", ":"))


def json_map(mapping: Any) -> str:
    return json.dumps(dict(mapping), separators=(",", ":"), sort_keys=True)


# -- natural keys of the raw event log ----------------------------------------------------------
def event_key(msg: Message) -> str:
    if isinstance(msg, ev.DriftEvent):
        return msg.drift_id
    if isinstance(msg, ev.Campaign):
        return msg.campaign_id
    if isinstance(msg, ev.Verdict):  # a failed re-check after a pass is a second, distinct event
        return f"{msg.candidate_id}:{label(ev.VerdictStatus, msg.status)}"
    if isinstance(msg, ev.BoardNote):
        return msg.note_id
    return msg.candidate_id  # Candidate, BenchmarkResult, KernelPromoted, KernelDemoted


# -- rows ---------------------------------------------------------------------------------------
def profile_row(p: ev.TrafficProfile, profile_id: str, source: str) -> Row:
    return {
        "profile_id": profile_id, "source": source, "model": p.model,
        "window_start_s": p.window_start_s, "window_end_s": p.window_end_s, "requests": p.requests,
        "prompt_p10": p.prompt_tokens.p10, "prompt_p50": p.prompt_tokens.p50,
        "prompt_p90": p.prompt_tokens.p90, "prompt_p99": p.prompt_tokens.p99,
        "prompt_mean": p.prompt_tokens.mean,
        "output_p10": p.output_tokens.p10, "output_p50": p.output_tokens.p50,
        "output_p90": p.output_tokens.p90, "output_p99": p.output_tokens.p99,
        "output_mean": p.output_tokens.mean,
        "arrival_rate": p.arrival_rate, "burstiness": p.burstiness,
        "prefix_hit_rate": p.prefix_hit_rate, "concurrency": p.concurrency,
        "expert_load": list(p.expert_load), "buckets": json_list(p.buckets),
    }


def drift_row(d: ev.DriftEvent, reference_id: str, current_id: str) -> Row:
    return {
        "drift_id": d.drift_id, "t_s": d.t_s, "metrics": [c.metric for c in d.changes],
        "changes": json_list(d.changes),
        "reference_profile_id": reference_id, "current_profile_id": current_id,
    }


CAMPAIGN_STATE_RANK = {"running": 1, "completed": 2, "failed": 2}


def campaign_state(c: ev.Campaign, subject: str) -> str:
    """The state the message announces: its own field, else the subject it came on."""
    if c.state != ev.CAMPAIGN_STATE_UNSPECIFIED:
        state = label(ev.CampaignState, c.state)
    else:
        state = {subjects.CAMPAIGN_STARTED: "running", subjects.CAMPAIGN_COMPLETED: "completed",
                 subjects.CAMPAIGN_FAILED: "failed"}.get(subject, "")
    if state not in CAMPAIGN_STATE_RANK:
        raise Poison(f"Campaign {c.campaign_id} on {subject} has no usable state")
    return state


def campaign_row(c: ev.Campaign, state: str, profile_id: str) -> Row:
    return {
        "campaign_id": c.campaign_id, "model": c.model, "slots": list(c.slots), "trigger": c.trigger,
        "budget": c.budget, "state": state, "profile_id": profile_id,
        "started_unix": c.started_unix, "finished_unix": c.finished_unix, "proposed": c.proposed,
        "stop_reason": c.stop_reason,
    }


def candidate_row(c: ev.Candidate) -> Row:
    return {
        "candidate_id": c.candidate_id, "campaign_id": c.campaign_id, "slot": c.slot,
        "backend": label(ev.Backend, c.backend), "agent": c.agent, "params": json_map(c.params),
        "model": c.model, "parent_id": c.parent_id, "created_unix": c.created_unix,
        "shapes": json_list(c.shapes), "source": c.source,
    }


def benchmark_row(b: ev.BenchmarkResult) -> Row:
    return {
        "candidate_id": b.candidate_id, "campaign_id": b.campaign_id, "slot": b.slot,
        "status": label(ev.BenchStatus, b.status), "reason": b.reason,
        "median_us": b.candidate.median_us, "p10_us": b.candidate.p10_us,
        "p90_us": b.candidate.p90_us, "runs": b.candidate.runs,
        "incumbent_median_us": b.incumbent.median_us, "incumbent_p10_us": b.incumbent.p10_us,
        "incumbent_p90_us": b.incumbent.p90_us, "incumbent_runs": b.incumbent.runs,
        "incumbent_id": b.incumbent_id, "aa_spread": b.aa_spread, "speedup": b.speedup,
        "speedup_lo": b.speedup_lo, "speedup_hi": b.speedup_hi,
        "speedup_vs_reference": b.speedup_vs_reference, "engine_id": b.engine_id, "tier": b.tier,
        "hardware": b.hardware, "model": b.model, "bench_s": b.bench_s, "finished_unix": b.finished_unix,
    }


def verdict_row(v: ev.Verdict) -> Row:
    return {
        "candidate_id": v.candidate_id, "campaign_id": v.campaign_id, "slot": v.slot,
        "status": label(ev.VerdictStatus, v.status), "failed_stage": v.failed_stage, "reason": v.reason,
        "checks": json_list(v.checks), "speedup": v.speedup, "speedup_lo": v.speedup_lo,
        "speedup_vs_reference": v.speedup_vs_reference, "hardware": v.hardware, "model": v.model,
        "verify_s": v.verify_s, "finished_unix": v.finished_unix,
    }


def board_note_row(n: ev.BoardNote) -> Row:
    return {
        "note_id": n.note_id, "campaign_id": n.campaign_id, "agent": n.agent, "slot": n.slot,
        "text": n.text, "params": json_map(n.params), "score": n.score, "created_unix": n.created_unix,
    }


def validate(msg: Message, subject: str) -> None:
    """Poison for a message that decoded but carries nothing the registry could key it by."""
    if isinstance(msg, ev.DriftEvent):
        require(msg, subject, "drift_id")
    elif isinstance(msg, ev.Campaign):
        require(msg, subject, "campaign_id")
        campaign_state(msg, subject)
    elif isinstance(msg, ev.Candidate):
        require(msg, subject, "candidate_id", "slot", "source")
    elif isinstance(msg, ev.BenchmarkResult | ev.Verdict):
        require(msg, subject, "candidate_id", "status")
    elif isinstance(msg, ev.BoardNote):
        require(msg, subject, "note_id")
    elif isinstance(msg, ev.KernelPromoted | ev.KernelDemoted):
        require(msg, subject, "candidate_id")
