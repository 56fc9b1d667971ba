"""Every NATS subject and JetStream stream name, in one place."""

from __future__ import annotations

from dataclasses import dataclass

# JetStream (durable) subjects
TRAFFIC_REQUESTS = "traffic.requests"
TRAFFIC_DRIFT = "traffic.drift"
CAMPAIGN_STARTED = "campaigns.started"
CAMPAIGN_COMPLETED = "campaigns.completed"
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
CAMPAIGN_START = "agents.campaign.start"
ENGINE_DISCOVER = "engine.discover"  # reply: the host's gRPC address ("host:port")


@dataclass(frozen=True)
class Stream:
    name: str
    subjects: tuple[str, ...]
    max_bytes: int
    max_age_s: float


# Traffic is high-volume and only useful recently; the loop's own events are the system of record
# until the registry has stored them.
STREAMS: tuple[Stream, ...] = (
    Stream("TRAFFIC", (TRAFFIC_REQUESTS,), max_bytes=256 * 2**20, max_age_s=24 * 3600),
    Stream(
        "LOOP",
        ("traffic.drift", "campaigns.>", "candidates.>", "kernel.>", f"{BOARD_PREFIX}.>"),
        max_bytes=512 * 2**20,
        max_age_s=7 * 24 * 3600,
    ),
)
