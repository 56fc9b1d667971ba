"""Helpers for agent pool tests: the service on its own bus connection, and the test in the engine's role.

The engine is another service, so the tests play its part with real messages: they consume
`candidates.proposed` and publish real BenchmarkResults on `candidates.benchmarked`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool.config import AgentPoolConfig
from services.agent_pool.service import AgentPoolService
from services.common import subjects
from services.common.bus import Bus, Delivery
from services.common.config import CommonSettings, Env

BUCKETS = [
    ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=3, context_len=700, weight=0.7),
    ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=1, context_len=1900, weight=0.3),
]


def env_for(nats_url: str, data_dir: Path, **overrides: str | int | float) -> dict[str, str]:
    values = {
        "POLYMORPH_NATS_URL": nats_url,
        "POLYMORPH_DATA_DIR": str(data_dir),
        "POLYMORPH_LOG_LEVEL": "warning",
        "POLYMORPH_AGENT_TRITON": "off",
    }
    values.update({f"POLYMORPH_{k.upper()}": str(v) for k, v in overrides.items()})
    return values


async def start_service(values: dict[str, str]) -> tuple[AgentPoolService, Bus]:
    env = Env(values)
    common = CommonSettings.from_env(env)
    service = AgentPoolService(AgentPoolConfig.from_env(env), common)
    bus = await Bus.connect(common.nats_url, "agent_pool")
    await service.start(bus)
    return service, bus


async def stop_service(service: AgentPoolService, bus: Bus) -> None:
    await bus.close()
    await service.stop()


@pytest.fixture
async def pool(nats_url: str, tmp_path: Path) -> AsyncIterator[Callable]:
    """pool(**overrides) starts an agent pool service; every one started is stopped at the end."""
    started: list[tuple[AgentPoolService, Bus]] = []

    async def make(**overrides) -> AgentPoolService:
        service, bus = await start_service(env_for(nats_url, tmp_path / "data", **overrides))
        started.append((service, bus))
        return service

    yield make
    for service, bus in started:
        await stop_service(service, bus)


def drift(drift_id: str, model: str = "llama-tiny") -> ev.DriftEvent:
    return ev.DriftEvent(
        drift_id=drift_id, t_s=12.5,
        changes=[ev.MetricChange(metric="prompt_tokens", before=300, after=1800, ks=0.6)],
        current=ev.TrafficProfile(profile_id=f"p-{drift_id}", model=model, buckets=BUCKETS),
    )


def result(c: ev.Candidate, speedup: float, status: int = ev.BENCH_STATUS_OK, reason: str = "") -> ev.BenchmarkResult:
    return ev.BenchmarkResult(
        candidate_id=c.candidate_id, campaign_id=c.campaign_id, slot=c.slot, status=status, reason=reason,
        speedup=speedup if status == ev.BENCH_STATUS_OK else 0.0, speedup_lo=speedup * 0.97,
        speedup_hi=speedup * 1.03, incumbent_id="reference", engine_id="test-engine", tier="fast",
        hardware="cpu", model=c.model, finished_unix=time.time(),
    )


class FakeEngine:
    """Collects proposed candidates; `score` (if set) answers each one as soon as it arrives. Answers
    engine.discover for `model`, as an engine host does (campaigns start only for a served model)."""

    def __init__(self, bus: Bus, score: Callable[[ev.Candidate], ev.BenchmarkResult | None] | None = None,
                 model: str = "llama-tiny"):
        self.bus = bus
        self.score = score
        self.model = model
        self.candidates: list[ev.Candidate] = []

    async def start(self, durable: str = "test-engine") -> FakeEngine:
        await self.bus.nc.subscribe(subjects.ENGINE_DISCOVER, cb=self._discover)
        await self.bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, self._on, durable=durable)
        return self

    async def _discover(self, msg) -> None:
        request = ev.DiscoverRequest.FromString(msg.data)
        if request.model in ("", self.model) and msg.reply:
            await msg.respond(ev.EngineAddress(address="127.0.0.1:1", engine_id="test-engine", model=self.model,
                                               hardware="cpu", tiers=["fast"]).SerializeToString())

    async def _on(self, c: ev.Candidate, delivery: Delivery) -> None:
        self.candidates.append(c)
        if self.score is not None:
            answer = self.score(c)
            if answer is not None:
                await self.bus.publish(subjects.CANDIDATES_BENCHMARKED, answer, msg_id=c.candidate_id)

    async def answer(self, c: ev.Candidate, speedup: float, status: int = ev.BENCH_STATUS_OK) -> None:
        await self.bus.publish(subjects.CANDIDATES_BENCHMARKED, result(c, speedup, status), msg_id=c.candidate_id)


class Collector:
    """A durable consumer that keeps every message of one subject."""

    def __init__(self) -> None:
        self.items: list = []

    @classmethod
    async def on(cls, bus: Bus, subject: str, msg_type, durable: str) -> Collector:
        collector = cls()

        async def keep(msg, delivery: Delivery) -> None:
            collector.items.append(msg)

        await bus.consume(subject, msg_type, keep, durable=durable)
        return collector


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s}s")
        await asyncio.sleep(0.05)
