"""The profiler's own request record: a light, slotted twin of `RequestRecord` for fast ingest.

Trace readers produce these directly (no protobuf per line); the bus path converts from the proto.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from proto.gen.polymorph.v1 import events_pb2 as ev

MAX_TOKENS = 10_000_000  # larger than any context a model serves: a record claiming more is malformed


class MalformedRecord(ValueError):
    """A record that cannot be profiled (negative or absurd token counts, no arrival time, ...)."""


@dataclass(slots=True)
class Record:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None = None
    block_hashes: list[int] = field(default_factory=list)
    expert_counts: list[int] = field(default_factory=list)
    model: str = ""
    tag: str = ""
    request_id: str = ""

    def to_proto(self) -> ev.RequestRecord:
        msg = ev.RequestRecord(
            arrival_s=self.arrival_s,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            block_hashes=self.block_hashes,
            expert_counts=self.expert_counts,
            model=self.model,
            tag=self.tag,
            request_id=self.request_id,
        )
        if self.cached_tokens is not None:
            msg.cached_tokens = self.cached_tokens
        return msg

    @classmethod
    def from_proto(cls, msg: ev.RequestRecord) -> Record:
        return validated(
            cls(
                arrival_s=msg.arrival_s,
                prompt_tokens=msg.prompt_tokens,
                output_tokens=msg.output_tokens,
                cached_tokens=msg.cached_tokens if msg.HasField("cached_tokens") else None,
                block_hashes=list(msg.block_hashes),
                expert_counts=list(msg.expert_counts),
                model=msg.model,
                tag=msg.tag,
                request_id=msg.request_id,
            )
        )


def validated(record: Record) -> Record:
    """Raise MalformedRecord when the record cannot be profiled; return it otherwise."""
    if not math.isfinite(record.arrival_s):
        raise MalformedRecord(f"arrival time is not finite: {record.arrival_s}")
    if not 0 <= record.prompt_tokens <= MAX_TOKENS:
        raise MalformedRecord(f"prompt_tokens out of range: {record.prompt_tokens}")
    if not 0 <= record.output_tokens <= MAX_TOKENS:
        raise MalformedRecord(f"output_tokens out of range: {record.output_tokens}")
    if record.cached_tokens is not None and not 0 <= record.cached_tokens <= MAX_TOKENS:
        raise MalformedRecord(f"cached_tokens out of range: {record.cached_tokens}")
    if any(c < 0 for c in record.expert_counts):
        raise MalformedRecord("negative expert count")
    return record
