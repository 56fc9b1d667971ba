"""Small helpers for registry tests: SQL over the bus, waiting, message builders."""

from __future__ import annotations

import asyncio
import hashlib

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus

SOURCE = 'SLOT = "{slot}"\nBACKEND = "torch"\n\ndef kernel(x, weight, eps):  # variant {n}\n    return x\n'


async def sql(bus: Bus, query: str, max_rows: int = 0) -> ev.SqlReply:
    return await bus.request(subjects.REGISTRY_SQL, ev.SqlRequest(query=query, max_rows=max_rows), ev.SqlReply)


async def rows(bus: Bus, query: str) -> list[tuple]:
    """Rows as tuples of text, None for NULL; fails loudly on an error reply."""
    reply = await sql(bus, query)
    assert not reply.error, reply.error
    return [tuple(None if n else v for v, n in zip(r.values, r.is_null, strict=True)) for r in reply.rows]


async def scalar(bus: Bus, query: str) -> str | None:
    """The first value of the first row; None when there is no row (yet)."""
    found = await rows(bus, query)
    return found[0][0] if found else None


async def wait_for(predicate, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def wait_sql(bus: Bus, query: str, expected: str, timeout_s: float = 20.0) -> None:
    """Wait until a one-value query returns `expected` (as text)."""
    seen: list[str | None] = []

    async def check() -> bool:
        seen.append(await scalar(bus, query))
        return seen[-1] == expected

    try:
        await wait_for(check, timeout_s)
    except AssertionError:
        raise AssertionError(f"{query!r} stayed {seen[-1]!r}, expected {expected!r}") from None


def candidate(n: int, slot: str = "rmsnorm", campaign_id: str = "c1") -> ev.Candidate:
    source = SOURCE.format(slot=slot, n=n)
    cid = hashlib.sha256(f"{slot}\n{source}".encode()).hexdigest()[:16]
    return ev.Candidate(candidate_id=cid, campaign_id=campaign_id, slot=slot, backend=ev.BACKEND_TORCH,
                        source=source, agent="search", params={"variant": str(n)}, model="llama-tiny",
                        created_unix=1.0e9 + n)


def benchmark(c: ev.Candidate, *, speedup_lo: float, vs_reference: float, incumbent_id: str = "reference",
              status: int = ev.BENCH_STATUS_OK) -> ev.BenchmarkResult:
    return ev.BenchmarkResult(
        candidate_id=c.candidate_id, campaign_id=c.campaign_id, slot=c.slot, status=status,
        candidate=ev.Timing(median_us=10.0, p10_us=9.0, p90_us=11.0, runs=50),
        incumbent=ev.Timing(median_us=12.0, p10_us=11.0, p90_us=13.0, runs=50), incumbent_id=incumbent_id,
        aa_spread=0.02, speedup=speedup_lo + 0.05, speedup_lo=speedup_lo, speedup_hi=speedup_lo + 0.1,
        speedup_vs_reference=vs_reference, engine_id="engine-a", tier="fast", hardware="cpu-test",
        model="llama-tiny", bench_s=1.5,
    )


def verdict(c: ev.Candidate, passed: bool = True, stage: str = "") -> ev.Verdict:
    return ev.Verdict(
        candidate_id=c.candidate_id, campaign_id=c.campaign_id, slot=c.slot,
        status=ev.VERDICT_STATUS_PASSED if passed else ev.VERDICT_STATUS_FAILED,
        failed_stage=stage, reason="" if passed else f"{stage} mismatch",
        checks=[ev.CheckResult(stage="static", passed=True),
                ev.CheckResult(stage=stage or "end_to_end", passed=passed)],
        hardware="cpu-test", model="llama-tiny", verify_s=2.0,
    )


async def promoted_count(bus: Bus) -> int:
    """kernel.promoted messages in their stream."""
    stream = subjects.stream_for(subjects.KERNEL_PROMOTED)
    info = await bus.js.stream_info(stream, subjects_filter=subjects.KERNEL_PROMOTED)
    return (info.state.subjects or {}).get(subjects.KERNEL_PROMOTED, 0)
