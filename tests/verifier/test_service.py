"""The verifier service on a real nats-server (no engine needed: static failures, retries, filtering)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.common.config import CommonSettings, ConfigError, Env
from services.common.slot_specs import candidate_id as content_id
from services.verifier.config import VerifierConfig
from services.verifier.service import VerifierService, build
from services.verifier.store import ProtoStore
from tests.helpers import consumer_info
from tests.verifier.adversarial_cases import CASES, HONEST_RMSNORM
from tests.verifier.helpers import benchmark, candidate, wait_for

TIMER_PATCH = next(c.source for c in CASES if c.name == "timer_patch")


class Harness:
    """The service on its own connection (closing it stops the service) plus a verdict collector."""

    def __init__(self, nats_url: str, data_dir: Path, bus: Bus) -> None:
        self.nats_url, self.data_dir, self.bus = nats_url, data_dir, bus
        self.verdicts: list[ev.Verdict] = []
        self.service: VerifierService | None = None
        self._service_bus: Bus | None = None

    async def start(self, **extra: str) -> VerifierService:
        env = Env({"POLYMORPH_NATS_URL": self.nats_url, "POLYMORPH_DATA_DIR": str(self.data_dir),
                   "POLYMORPH_MODEL": "llama-tiny", "POLYMORPH_VERIFIER_DISCOVER_TIMEOUT_S": "0.5", **extra})
        self.service = build(env, CommonSettings.from_env(env))
        self._service_bus = await Bus.connect(self.nats_url, "verifier")
        await self.service.start(self._service_bus)
        return self.service

    async def stop(self) -> None:
        if self._service_bus is not None:
            await self._service_bus.close()
            self._service_bus = None
        if self.service is not None:
            await self.service.stop()

    async def publish(self, *messages: ev.Candidate | ev.BenchmarkResult, suffix: str = "") -> None:
        for message in messages:
            subject = subjects.CANDIDATES_PROPOSED if isinstance(message, ev.Candidate) else \
                subjects.CANDIDATES_BENCHMARKED
            await self.bus.publish(subject, message, msg_id=message.candidate_id + suffix)

    async def consumer(self, durable: str):
        return await consumer_info(self.bus, durable)


@pytest.fixture
async def harness(bus: Bus, nats_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(nats_url, tmp_path / "data", bus)

    async def on_verdict(verdict: ev.Verdict) -> None:
        h.verdicts.append(verdict)

    await bus.subscribe(subjects.CANDIDATES_VERIFIED, ev.Verdict, on_verdict)
    yield h
    await h.stop()


async def test_static_failure_verdict_is_published_stored_and_republished(harness: Harness) -> None:
    await harness.start()
    cheat = candidate(TIMER_PATCH)
    await harness.publish(cheat, benchmark(cheat))
    await wait_for(lambda: harness.verdicts)
    verdict = harness.verdicts[0]
    assert verdict.candidate_id == cheat.candidate_id and verdict.campaign_id == "camp-1"
    assert verdict.status == ev.VERDICT_STATUS_FAILED and verdict.failed_stage == "static"
    assert verdict.reason.startswith("static: line 5: import of 'time' is forbidden")
    assert [c.stage for c in verdict.checks] == ["static"]
    assert (verdict.speedup, verdict.speedup_lo, verdict.speedup_vs_reference) == (1.5, 1.2, 1.5)
    assert verdict.hardware == "test-cpu" and verdict.model == "llama-tiny" and verdict.verify_s > 0
    verified = subjects.CANDIDATES_VERIFIED
    stored = await harness.bus.js.get_last_msg(subjects.stream_for(verified), verified)
    assert ev.Verdict.FromString(stored.data) == verdict

    # a redelivered benchmark republishes the very same verdict, also after a restart
    await harness.publish(benchmark(cheat), suffix=":again")
    await wait_for(lambda: len(harness.verdicts) == 2)
    await harness.stop()
    await harness.start()
    await harness.publish(benchmark(cheat), suffix=":after-restart")
    await wait_for(lambda: len(harness.verdicts) == 3)
    assert harness.verdicts[1] == verdict and harness.verdicts[2] == verdict


async def test_benchmark_before_its_candidate_is_retried(harness: Harness) -> None:
    await harness.start()
    cheat = candidate(TIMER_PATCH.replace("0.0", "1e-9"))
    await harness.publish(benchmark(cheat))
    await asyncio.sleep(1.0)
    assert not harness.verdicts  # source unknown: nak, no verdict
    await harness.publish(cheat)
    await wait_for(lambda: harness.verdicts)
    assert harness.verdicts[0].failed_stage == "static"
    info = await harness.consumer("verifier")
    assert info.delivered.consumer_seq >= 2  # the one benchmark was delivered again after the nak


async def test_only_ok_benchmarks_that_beat_the_incumbent_are_verified(harness: Harness) -> None:
    await harness.start()
    slow, wrong = candidate(TIMER_PATCH + "\n# slow\n"), candidate(TIMER_PATCH + "\n# wrong\n")
    await harness.publish(slow, wrong, benchmark(slow, lo=0.97), benchmark(wrong, status=ev.BENCH_STATUS_WRONG_OUTPUT))

    async def acked() -> bool:
        info = await harness.consumer("verifier")
        return info.ack_floor.consumer_seq >= 2

    for _ in range(200):
        if await acked():
            break
        await asyncio.sleep(0.05)
    assert await acked()
    await asyncio.sleep(0.3)
    assert harness.verdicts == []


async def test_candidate_whose_id_is_not_its_content_hash_is_terminated(harness: Harness) -> None:
    service = await harness.start()
    forged = candidate(HONEST_RMSNORM)
    forged.candidate_id = content_id("rmsnorm", TIMER_PATCH)  # someone else's id
    await harness.publish(forged)
    await harness.bus.js.publish(subjects.CANDIDATES_BENCHMARKED, b"\xff\x00 not protobuf")
    good = candidate(TIMER_PATCH + "\n# another\n")
    await harness.publish(good)
    await wait_for(lambda: good.candidate_id in service.sources)
    await asyncio.sleep(0.3)
    assert service.sources.get(forged.candidate_id) is None
    for durable in ("verifier-candidates", "verifier"):
        info = await harness.consumer(durable)
        assert info.num_redelivered == 0 and info.num_ack_pending == 0


async def test_unreachable_engine_means_retry_not_a_failed_verdict(harness: Harness) -> None:
    service = await harness.start()  # no engine answers engine.discover on this nats-server
    honest = candidate(HONEST_RMSNORM)
    await harness.publish(honest, benchmark(honest))

    async def retried() -> bool:
        return (await harness.consumer("verifier")).delivered.consumer_seq >= 2  # nak, then redelivered

    for _ in range(300):
        if await retried():
            break
        await asyncio.sleep(0.05)
    assert await retried()
    assert harness.verdicts == [] and service.verdicts.get(honest.candidate_id) is None


def test_config_from_env_and_bad_values(tmp_path: Path) -> None:
    env = Env({"POLYMORPH_DATA_DIR": str(tmp_path), "POLYMORPH_VERIFIER_E2E_STEPS": "4",
               "POLYMORPH_VERIFIER_RANDOM_SHAPES": "decode:5x19, prefill:2x33",
               "POLYMORPH_VERIFIER_ENGINE_ADDRESS": "10.0.0.7:5000"})
    config = VerifierConfig.from_env(env)
    assert config.e2e_steps == 4 and config.engine_address == "10.0.0.7:5000"
    assert [str(s) for s in config.random_shapes] == ["decode:5x19", "prefill:2x33"]
    assert config.data_dir == tmp_path / "verifier" and config.max_deliver == 40
    for name, value in (("RANDOM_SHAPES", "decode:3"), ("RANDOM_SHAPES", "train:1x2"), ("E2E_STEPS", "0"),
                        ("INPUT_DTYPE", "int8")):
        with pytest.raises(ConfigError):
            VerifierConfig.from_env(Env({f"POLYMORPH_VERIFIER_{name}": value}))


def test_store_is_atomic_and_sets_corrupt_entries_aside(tmp_path: Path) -> None:
    store: ProtoStore[ev.Verdict] = ProtoStore(tmp_path, ev.Verdict)
    verdict = ev.Verdict(candidate_id="abc123", reason="static: line 1")
    store.put("abc123", verdict)
    assert store.get("abc123") == verdict and "abc123" in store
    assert list(tmp_path.iterdir()) == [tmp_path / "abc123.pb"]  # no temp files left behind
    (tmp_path / "bad1.pb").write_bytes(b"\xff\xff\xff")
    assert store.get("bad1") is None and (tmp_path / "bad1.corrupt").exists()
    assert "../etc" not in store
    with pytest.raises(ValueError):
        store.put("../etc/passwd", verdict)
