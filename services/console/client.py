"""Short-lived bus clients for CLI commands: one connection, one request, closed."""

from __future__ import annotations

import asyncio

import nats

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects, tls
from services.common.bus import parse
from services.common.identities import redact


class StackUnavailable(RuntimeError):
    pass


async def connect_once(url: str) -> nats.NATS:
    """One connection attempt with one clear error if it fails (services instead retry forever, which
    a command run by hand must not). nats-py retries a refused first connect in a loop even without
    reconnects, so the first error stops it."""
    failures: list[BaseException] = []

    async def stop(exc: Exception) -> None:
        failures.append(exc)
        attempt.cancel()

    attempt = asyncio.ensure_future(nats.connect(url, connect_timeout=3, max_reconnect_attempts=0,
                                                 allow_reconnect=False, error_cb=stop, **tls.nats_options()))
    try:
        return await asyncio.wait_for(attempt, timeout=5)
    except (Exception, asyncio.CancelledError) as exc:
        reason = failures[0] if failures else exc
        raise StackUnavailable(f"cannot reach NATS at {redact(url)} ({type(reason).__name__}: {reason}); "
                               "is `polymorph up` running?") from exc


async def ensure_reachable(url: str) -> None:
    await (await connect_once(url)).close()


async def _request(url: str, subject: str, payload: bytes, timeout_s: float) -> bytes:
    nc = await connect_once(url)
    try:
        reply = await nc.request(subject, payload, timeout=timeout_s)
    except nats.errors.NoRespondersError as exc:
        raise StackUnavailable(f"nobody answers {subject} on {redact(url)}: is that service running?") from exc
    except nats.errors.TimeoutError as exc:
        raise StackUnavailable(f"{subject} did not answer within {timeout_s}s") from exc
    finally:
        await nc.close()
    return reply.data


async def sql(url: str, query: str, max_rows: int = 0, timeout_s: float = 60.0,
              json_values: bool = False) -> ev.SqlReply:
    """`json_values`: ask for every value as JSON as well, types kept (for --format json)."""
    request = ev.SqlRequest(query=query, max_rows=max_rows, json_values=json_values)
    data = await _request(url, subjects.REGISTRY_SQL, request.SerializeToString(), timeout_s)
    return parse(ev.SqlReply, data, bounded=False)


async def export(url: str, directory: str, timeout_s: float = 120.0) -> ev.ExportReply:
    """`directory`: relative to the registry's export root, on the registry's host."""
    data = await _request(url, subjects.REGISTRY_EXPORT, ev.ExportRequest(dir=directory).SerializeToString(),
                          timeout_s)
    return parse(ev.ExportReply, data, bounded=False)


async def start_campaign(url: str, request: ev.StartCampaignRequest, timeout_s: float = 30.0) -> ev.Campaign:
    data = await _request(url, subjects.CAMPAIGN_START, request.SerializeToString(), timeout_s)
    return parse(ev.Campaign, data, bounded=False)


async def discover(url: str, model: str, tier: str = "slow", timeout_s: float = 10.0) -> str:
    """The gRPC address of an engine host serving `model` at `tier`."""
    request = ev.DiscoverRequest(model=model, tier=tier)
    reply = parse(ev.EngineAddress, await _request(url, subjects.ENGINE_DISCOVER, request.SerializeToString(),
                                                   timeout_s), bounded=False)
    if reply.error or not reply.address:
        raise StackUnavailable(f"engine.discover for {model!r} ({tier}): {reply.error or 'no address'}")
    return reply.address
