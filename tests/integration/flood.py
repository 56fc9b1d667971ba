"""Garbage for the bus, as a buggy or compromised publisher would send it: undecodable bytes, empty
payloads, messages of the wrong type, oversized fields. Used by the flood test and its benchmark."""

from __future__ import annotations

import random

import nats

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import identities, subjects

DURABLE_SUBJECTS = (
    subjects.TRAFFIC_REQUESTS,
    subjects.TRAFFIC_DRIFT,
    subjects.CAMPAIGN_STARTED,
    subjects.CAMPAIGN_COMPLETED,
    subjects.CAMPAIGN_FAILED,
    subjects.CANDIDATES_PROPOSED,
    subjects.CANDIDATES_BENCHMARKED,
    subjects.CANDIDATES_VERIFIED,
    subjects.KERNEL_PROMOTED,
    subjects.KERNEL_DEMOTED,
    subjects.board("c-garbage"),
)
REQUEST_SUBJECTS = (subjects.CAMPAIGN_START, subjects.REGISTRY_SQL, subjects.REGISTRY_EXPORT, subjects.ENGINE_DISCOVER)
PER_SUBJECT = 140  # 15 subjects: over 2,000 messages in all


def garbage(rng: random.Random) -> list[bytes]:
    """PER_SUBJECT payloads: random bytes, empty, other message types, an oversized field."""
    wrong_types = [
        ev.Verdict(candidate_id="0123456789abcdef", status=ev.VERDICT_STATUS_PASSED, speedup=9.0),
        ev.BenchmarkResult(candidate_id="feedfacefeedface", status=ev.BENCH_STATUS_OK, speedup_lo=50.0),
        ev.SqlRequest(query="select 1"),
        ev.KernelDemoted(candidate_id="x", reason="r"),
        ev.DriftEvent(drift_id="d-" + "y" * 20, t_s=1e12),
        ev.EngineAddress(address="evil:1", hardware="h200"),
    ]
    out: list[bytes] = [b"", b"\x00", ev.Campaign(campaign_id="c", model="m" * 900_000).SerializeToString()]
    out += [m.SerializeToString() for m in wrong_types]
    while len(out) < PER_SUBJECT:
        out.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))))
    return out



async def flood_durable_subjects(url_for, rng: random.Random) -> int:
    """Publish PER_SUBJECT garbage payloads on every durable subject, each with its owner's identity
    (`url_for(identity)` gives that identity's URL); returns how many were sent."""
    sent = 0
    for subject in DURABLE_SUBJECTS:
        owner = await nats.connect(url_for(identities.publisher_of(subject)))
        js = owner.jetstream()
        for payload in garbage(rng):
            await js.publish(subject, payload)
            sent += 1
        await owner.close()
    return sent


async def flood_requests(url: str, rng: random.Random) -> list[tuple[str, bytes, bytes | None]]:
    """Send PER_SUBJECT garbage requests on every request subject as `url`'s identity (the operator);
    returns (subject, payload, reply data or None when nobody answered) for each."""
    nc = await nats.connect(url)
    out: list[tuple[str, bytes, bytes | None]] = []
    try:
        for subject in REQUEST_SUBJECTS:
            for payload in garbage(rng):
                try:
                    reply: bytes | None = (await nc.request(subject, payload, timeout=10)).data
                except nats.errors.TimeoutError:
                    reply = None
                out.append((subject, payload, reply))
    finally:
        await nc.close()
    return out
