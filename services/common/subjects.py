"""Every NATS subject and JetStream stream name, in one place."""

from __future__ import annotations

from dataclasses import dataclass

# JetStream (durable) subjects
TRAFFIC_REQUESTS = "traffic.requests"
TRAFFIC_DRIFT = "traffic.drift"
CAMPAIGN_STARTED = "campaigns.started"
CAMPAIGN_COMPLETED = "campaigns.completed"
CAMPAIGN_FAILED = "campaigns.failed"  # its steps kept failing: stop_reason says why
CANDIDATES_PROPOSED = "candidates.proposed"
CANDIDATES_BENCHMARKED = "candidates.benchmarked"
CANDIDATES_VERIFIED = "candidates.verified"
KERNEL_PROMOTED = "kernel.promoted"
KERNEL_DEMOTED = "kernel.demoted"
BOARD_PREFIX = "board"


def board(campaign_id: str) -> str:
    return f"{BOARD_PREFIX}.{campaign_id}"


# Core request/reply subjects (not persisted)
REGISTRY_SQL = "registry.sql"
REGISTRY_EXPORT = "registry.export"
REGISTRY_EXPERIENCE = "registry.experience"  # what earlier campaigns measured: warm starts
CAMPAIGN_START = "agents.campaign.start"
ENGINE_DISCOVER = "engine.discover"  # reply: the host's gRPC address ("host:port")


@dataclass(frozen=True)
class Stream:
    name: str
    subjects: tuple[str, ...]
    max_bytes: int
    max_age_s: float


# One stream per publishing identity (identities.py): JetStream de-duplicates message ids per stream,
# so with a stream of its own no identity can pre-empt another's ids. Traffic is high-volume and only
# useful recently; the loop's own events are the system of record until the registry has stored them.
_WEEK = 7 * 24 * 3600
STREAMS: tuple[Stream, ...] = (
    Stream("TRAFFIC", (TRAFFIC_REQUESTS,), max_bytes=256 * 2**20, max_age_s=24 * 3600),
    Stream("DRIFT", (TRAFFIC_DRIFT,), max_bytes=64 * 2**20, max_age_s=_WEEK),
    Stream("CAMPAIGNS", ("campaigns.>", f"{BOARD_PREFIX}.>", CANDIDATES_PROPOSED), max_bytes=256 * 2**20,
           max_age_s=_WEEK),
    Stream("BENCHMARKED", (CANDIDATES_BENCHMARKED,), max_bytes=128 * 2**20, max_age_s=_WEEK),
    Stream("VERIFIED", (CANDIDATES_VERIFIED,), max_bytes=128 * 2**20, max_age_s=_WEEK),
    Stream("KERNELS", ("kernel.>",), max_bytes=64 * 2**20, max_age_s=_WEEK),
)
LEGACY_STREAMS = ("LOOP",)  # one stream for every loop subject, before the streams were split by publisher


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcards: '*' one token, '>' one or more trailing tokens."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def stream_for(subject: str) -> str:
    """The stream that holds a subject ('' when none does)."""
    for stream in STREAMS:
        if any(subject_matches(pattern, subject) for pattern in stream.subjects):
            return stream.name
    return ""
