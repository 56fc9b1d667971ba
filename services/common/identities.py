"""Who may say what on the bus: one NATS identity per service and per outside role, with the subjects
each may publish, and the nats-server `authorization` block that enforces it.

Only the registry publishes kernel.promoted / kernel.demoted, only the verifier candidates.verified,
only engine hosts candidates.benchmarked, only the agent pool candidates.proposed, campaigns and board
notes, only the profiler traffic.drift; `traffic` may publish traffic.requests and nothing else,
`observer` may subscribe to everything and publish nothing, `serving` (an adapter inside a serving
stack) may read the promotions' stream and publish traffic.requests, `operator` (the CLI) may ask the
registry, the agent pool and the engines (SQL, export, campaign start, discovery). Each publishing
identity writes into streams of its own (subjects.STREAMS), so no identity can pre-empt another's
JetStream message ids. Credentials travel inside the NATS URL (nats://user:password@host:port);
`redact` keeps them out of logs.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from services.common import subjects as s

REPLIES = "_INBOX.>"
# what a service needs of JetStream: stream and consumer management of its own, acks, publish acks;
# never deleting or purging a stream
JETSTREAM = ("$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.>", "$JS.API.STREAM.CREATE.>",
             "$JS.API.STREAM.UPDATE.>", "$JS.API.CONSUMER.>", "$JS.ACK.>")
# what an operator may read of JetStream: stream and consumer state (how far each consumer has got)
JETSTREAM_READ = ("$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.>", "$JS.API.CONSUMER.INFO.>",
                  "$JS.API.CONSUMER.LIST.>", "$JS.API.CONSUMER.NAMES.>")
KERNELS = s.stream_for(s.KERNEL_PROMOTED)
NEVER = ("$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>")


@dataclass(frozen=True)
class Identity:
    name: str
    publish: tuple[str, ...]  # beyond replies
    jetstream: bool = True  # consumes durably (and creates its streams)
    subscribe: tuple[str, ...] = (">",)


IDENTITIES: dict[str, Identity] = {i.name: i for i in (
    Identity("registry", (s.KERNEL_PROMOTED, s.KERNEL_DEMOTED)),
    Identity("verifier", (s.CANDIDATES_VERIFIED, s.ENGINE_DISCOVER)),
    Identity("engine_host", (s.CANDIDATES_BENCHMARKED,)),
    # its campaign state lives in a JetStream key-value bucket (state.py): writes publish to $KV.<bucket>.>
    Identity("agent_pool", (s.CANDIDATES_PROPOSED, "campaigns.>", f"{s.BOARD_PREFIX}.>", "$KV.agent_pool.>",
                            s.ENGINE_DISCOVER, s.REGISTRY_EXPERIENCE)),  # discovery; warm starts
    # its catch-up after a crash reads the records acknowledged after its last snapshot, one by one
    Identity("traffic_profiler", (s.TRAFFIC_DRIFT, f"$JS.API.STREAM.MSG.GET.{s.stream_for(s.TRAFFIC_REQUESTS)}")),
    Identity("traffic", (s.TRAFFIC_REQUESTS, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.>"), jetstream=False,
             subscribe=(REPLIES,)),
    # a serving stack's adapter (services/adapters/vllm): reads the KERNELS stream through an ordered
    # consumer of its own (creates and reads it; never deletes one) and publishes its traffic
    Identity("serving", (s.TRAFFIC_REQUESTS, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.>",
                         *(f"$JS.API.CONSUMER.{verb}.{KERNELS}{tail}" for verb in ("CREATE", "INFO")
                           for tail in ("", ".>")), "$JS.FC.>"), jetstream=False, subscribe=(REPLIES,)),
    Identity("operator", (s.REGISTRY_SQL, s.REGISTRY_EXPORT, s.CAMPAIGN_START, s.ENGINE_DISCOVER, *JETSTREAM_READ),
             jetstream=False),
    Identity("observer", (), jetstream=False),
)}


def publisher_of(subject: str) -> str:
    """The identity that may publish `subject` ('' when none may)."""
    for identity in IDENTITIES.values():
        if any(s.subject_matches(pattern, subject) for pattern in identity.publish):
            return identity.name
    return ""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str


def _permissions(identity: Identity) -> dict[str, object]:
    publish = list(identity.publish)
    if identity.publish:  # replying to a request (SQL, discovery, campaign start) and request/reply itself
        publish.append(REPLIES)
    if identity.jetstream:
        publish.extend(JETSTREAM)
    return {"publish": {"allow": publish or ["_NONE_"], "deny": list(NEVER)},
            "subscribe": {"allow": list(identity.subscribe)}}


def server_config(credentials: dict[str, Credentials]) -> str:
    """The nats-server `authorization` block for these identities (JSON is valid NATS config)."""
    users = [{"user": c.user, "password": c.password, "permissions": _permissions(IDENTITIES[name])}
             for name, c in sorted(credentials.items())]
    return "authorization: " + json.dumps({"users": users}, indent=2) + "\n"


def generate(directory: Path) -> dict[str, Credentials]:
    """Credentials for every identity, kept in `directory` (one file each, mode 0600; reused when present)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    out = {}
    for name in IDENTITIES:
        path = directory / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
            out[name] = Credentials(data["user"], data["password"])
            continue
        creds = Credentials(name, secrets.token_urlsafe(24))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"user": creds.user, "password": creds.password}, f)
        out[name] = creds
    return out


def with_credentials(url: str, creds: Credentials) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(creds.user, safe='')}:{quote(creds.password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme or "nats", netloc, parts.path, "", ""))


def redact(url: str) -> str:
    """The URL without its password (for logs and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
