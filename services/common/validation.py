"""What a valid message from the bus is, for every consumer alike: how large each field may be, and
what each event type must carry to mean anything (an id of the right form, a known slot, a change).

Bus.parse applies it before any handler sees a message, so a message that fails is terminated (or its
request answered with the reason) and logged, never stored, acted on or retried. The size limits are
generous on purpose: they stop abuse (a 900 KB model name), not real kernels, prompts or reports.
Whether a message fits what a service knows (a benchmark for a candidate it holds, a model an engine
serves) is the consuming service's own check, as is the plausibility of a traffic record (the
profiler's Record.from_proto counts those).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.slot_specs import OPS

KIB = 1024
TEXT_FIELDS = {  # free text: sources, queries, reasons, notes
    "source": 256 * KIB,
    "query": 64 * KIB,
    "reason": 16 * KIB,
    "stop_reason": 16 * KIB,
    "detail": 16 * KIB,
    "text": 16 * KIB,
    "error": 16 * KIB,
    "profile_error": 16 * KIB,
}
NAME_CHARS = 256  # every other string: ids, model, slot, hardware, agent, tier, tag, subject-like names
BYTES_MAX = 4 * KIB  # signatures and the like
REPEATED_SCALARS = 64 * KIB  # block hashes of a long prompt, expert counts
REPEATED_ITEMS = 4 * KIB  # strings, messages and map entries: slots, shapes, checks, params


ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # campaign, drift, note, profile ids
CANDIDATE_ID = re.compile(r"[0-9a-f]{16}")  # services.common.slot_specs.candidate_id


class Invalid(ValueError):
    pass


class TooLarge(Invalid):
    pass


def check(message: Message) -> None:
    """Raise Invalid (TooLarge for sizes) naming what is wrong with `message`."""
    check_sizes(message)
    rule = RULES.get(type(message))
    if rule is not None:
        rule(message)


def _id(kind: str, value: str, pattern: re.Pattern[str] = ID) -> None:
    if not pattern.fullmatch(value):
        raise Invalid(f"{kind} {value[:80]!r} is not a valid id")


def _drift(d: ev.DriftEvent) -> None:
    _id("DriftEvent drift_id", d.drift_id)
    if not d.changes:
        raise Invalid(f"DriftEvent {d.drift_id} reports no change")
    if not math.isfinite(d.t_s):
        raise Invalid(f"DriftEvent {d.drift_id} t_s is not finite")


def _campaign(c: ev.Campaign) -> None:
    _id("Campaign campaign_id", c.campaign_id)
    if not c.model or not c.slots or c.budget < 1:
        raise Invalid(f"Campaign {c.campaign_id} needs a model, slots and a budget")
    unknown = [s for s in c.slots if s not in OPS]
    if unknown:
        raise Invalid(f"Campaign {c.campaign_id} names unknown slots {unknown[:5]}")


def _candidate(c: ev.Candidate) -> None:
    _id("Candidate candidate_id", c.candidate_id, CANDIDATE_ID)
    if c.slot not in OPS or not c.source:
        raise Invalid(f"Candidate {c.candidate_id} needs a known slot and a source")


def _result(r: ev.BenchmarkResult | ev.Verdict) -> None:
    _id(f"{type(r).__name__} candidate_id", r.candidate_id, CANDIDATE_ID)
    if not r.status:
        raise Invalid(f"{type(r).__name__} for {r.candidate_id} has no status")


def _note(n: ev.BoardNote) -> None:
    _id("BoardNote note_id", n.note_id)
    _id("BoardNote campaign_id", n.campaign_id)
    if not n.text:
        raise Invalid(f"BoardNote {n.note_id} has no text")


def _kernel(k: ev.KernelPromoted | ev.KernelDemoted) -> None:
    _id(f"{type(k).__name__} candidate_id", k.candidate_id, CANDIDATE_ID)
    if k.slot not in OPS:
        raise Invalid(f"{type(k).__name__} {k.candidate_id} names unknown slot {k.slot[:40]!r}")


RULES: dict[type[Message], Callable] = {
    ev.DriftEvent: _drift, ev.Campaign: _campaign, ev.Candidate: _candidate,
    ev.BenchmarkResult: _result, ev.Verdict: _result, ev.BoardNote: _note,
    ev.KernelPromoted: _kernel, ev.KernelDemoted: _kernel,
}


def check_sizes(message: Message, path: str = "") -> None:
    """Raise TooLarge naming the first field of `message` (recursively) that is past its limit."""
    where = path or type(message).__name__
    for field, value in message.ListFields():
        name = f"{where}.{field.name}"
        if field.is_repeated:
            is_item = field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING,
                                     FieldDescriptor.TYPE_BYTES)
            limit = REPEATED_ITEMS if is_item else REPEATED_SCALARS
            if len(value) > limit:
                raise TooLarge(f"{name} has {len(value)} entries; at most {limit}")
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                for key, item in value.items():
                    _scalar(f"{name}[key]", field.message_type.fields_by_name["key"], key)
                    _one(f"{name}[{str(key)[:40]}]", field.message_type.fields_by_name["value"], item)
            else:
                for item in value:
                    _one(name, field, item)
        else:
            _one(name, field, value)


def _one(name: str, field: FieldDescriptor, value: object) -> None:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        assert isinstance(value, Message)
        check_sizes(value, name)
    else:
        _scalar(name, field, value)


def _scalar(name: str, field: FieldDescriptor, value: object) -> None:
    if field.type == FieldDescriptor.TYPE_STRING:
        assert isinstance(value, str)
        limit = TEXT_FIELDS.get(field.name, NAME_CHARS)
        if len(value) > limit:
            raise TooLarge(f"{name} is {len(value)} characters long; at most {limit}")
    elif field.type == FieldDescriptor.TYPE_BYTES:
        assert isinstance(value, bytes)
        if len(value) > BYTES_MAX:
            raise TooLarge(f"{name} is {len(value)} bytes long; at most {BYTES_MAX}")
