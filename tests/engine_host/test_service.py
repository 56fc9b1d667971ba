"""The engine host service over a real nats-server: candidates in, results out, promotions installed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import engine_service_pb2_grpc as es_grpc
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.common.config import CommonSettings, Env
from services.common.grpc_server import channel
from services.common.signing import Signer
from services.engine_host.service import EngineHostService, build
from tests.engine_host import candidates as C
from tests.helpers import consumer_info, wait_for

SHAPES = [ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=2, context_len=33, weight=1.0)]



async def start_service(nats_url: str, data_dir: Path) -> tuple[EngineHostService, Bus]:
    common = CommonSettings(nats_url=nats_url, data_dir=data_dir, model="llama-tiny", log_format="json",
                            log_level="warning")
    env = Env({"POLYMORPH_ENGINE_DEVICE": "cpu", "POLYMORPH_ENGINE_TIERS": "fast", "POLYMORPH_ENGINE_ROUNDS": "4",
               "POLYMORPH_ENGINE_ID": "svc-test", "POLYMORPH_ENGINE_DEFAULT_SHAPES": "decode:2:33:1"})
    service = build(env, common)
    service_bus = await Bus.connect(nats_url, "engine_host")
    await service.start(service_bus)
    return service, service_bus


async def stop_service(service: EngineHostService, service_bus: Bus) -> None:
    await service_bus.close()
    await service.stop()


async def idle_consumer(bus: Bus, durable: str, delivered: int, timeout_s: float = 60.0):
    """Wait until the consumer has seen `delivered` messages and has nothing pending or unacked."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        info = await consumer_info(bus, durable)
        if info.delivered.stream_seq >= delivered and info.num_pending == 0 and info.num_ack_pending == 0:
            return info
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"consumer {durable} not idle: {info}")
        await asyncio.sleep(0.1)


def installed(service: EngineHostService, slot: str) -> set[str]:
    return {tier.op_ids()[slot] for tier in service.engine.tiers.values()}


@pytest.mark.timeout(240)
async def test_candidates_in_results_out_promotions_installed(bus: Bus, nats_url: str, tmp_path: Path) -> None:
    results: list[ev.BenchmarkResult] = []

    async def on_result(msg: ev.BenchmarkResult) -> None:
        results.append(msg)

    await bus.subscribe(subjects.CANDIDATES_BENCHMARKED, ev.BenchmarkResult, on_result)
    service, service_bus = await start_service(nats_url, tmp_path)
    try:
        # engine.discover → a gRPC address that answers
        address = await bus.request(subjects.ENGINE_DISCOVER, ev.DiscoverRequest(model="llama-tiny"),
                                    ev.EngineAddress)
        assert address.address == f"127.0.0.1:{service.port}" and address.tiers == ["fast"]
        assert address.engine_id == "svc-test" and address.hardware
        async with channel(address.address) as ch:
            status = await es_grpc.EngineServiceStub(ch).Status(es.StatusRequest())
        assert status.engine_id == "svc-test"

        # garbage and an empty candidate are terminated; the next candidate is benchmarked
        await bus.js.publish(subjects.CANDIDATES_PROPOSED, b"\xff\x00garbage")
        await bus.publish(subjects.CANDIDATES_PROPOSED, ev.Candidate(), msg_id="empty")
        fast = C.candidate("rmsnorm", C.RMSNORM_FAST, campaign_id="camp-1")
        fast.shapes.extend(SHAPES)
        await bus.publish(subjects.CANDIDATES_PROPOSED, fast, msg_id=fast.candidate_id)
        await wait_for(lambda: len(results) == 1)
        (result,) = results
        assert result.candidate_id == fast.candidate_id and result.campaign_id == "camp-1"
        assert result.status == ev.BENCH_STATUS_OK, result.reason
        assert result.tier == "fast" and result.engine_id == "svc-test" and result.model == "llama-tiny"
        assert result.incumbent_id == "reference" and result.bench_s > 0 and result.hardware

        # a redelivered candidate is answered from the store, not measured again
        await bus.publish(subjects.CANDIDATES_PROPOSED, fast, msg_id=f"{fast.candidate_id}-again")
        info = await idle_consumer(bus, "engine-fast", delivered=4)
        assert info.num_redelivered == 0 and service.engine.experiments == 1
        await wait_for(lambda: len(results) == 2)
        assert results[1] == results[0]  # the very same result, under the same msg_id (the stream dedups it)

        # promotions not signed by the registry's key, or altered after signing, are refused
        registry = Signer.load_or_create(tmp_path / "registry")  # where the host looks for the public key
        impostor = Signer(Ed25519PrivateKey.generate())
        promoted = ev.KernelPromoted(candidate_id=fast.candidate_id, slot="rmsnorm", model="llama-tiny",
                                     source=fast.source, backend=ev.BACKEND_TORCH, speedup_vs_reference=1.2)
        unsigned = ev.KernelPromoted()
        unsigned.CopyFrom(promoted)
        forged = ev.KernelPromoted()
        forged.CopyFrom(promoted)
        impostor.sign(forged)
        altered = ev.KernelPromoted()
        altered.CopyFrom(promoted)
        registry.sign(altered)
        altered.source = fast.source.replace("F.rms_norm(", "F.rms_norm(0.5 * ")
        altered.candidate_id = C.candidate("rmsnorm", altered.source).candidate_id
        for i, bad in enumerate((unsigned, forged, altered)):
            await bus.publish(subjects.KERNEL_PROMOTED, bad, msg_id=f"bad-{i}")
        await wait_for(lambda: service.refused_kernel_events == 3)
        assert installed(service, "rmsnorm") == {"reference"}
        # the genuine one becomes the incumbent; later results are relative to it
        registry.sign(promoted)
        await bus.publish(subjects.KERNEL_PROMOTED, promoted, msg_id=fast.candidate_id)
        await wait_for(lambda: installed(service, "rmsnorm") == {fast.candidate_id})
        ref = C.candidate("rmsnorm", C.RMSNORM_REF)
        ref.shapes.extend(SHAPES)
        await bus.publish(subjects.CANDIDATES_PROPOSED, ref, msg_id=ref.candidate_id)
        await wait_for(lambda: len(results) == 3)
        assert results[2].incumbent_id == fast.candidate_id
        assert results[2].speedup_vs_reference == pytest.approx(results[2].speedup * 1.2)
    finally:
        await stop_service(service, service_bus)

    # a restarted host re-installs what was promoted, and honours a demotion that came meanwhile
    restarted, restarted_bus = await start_service(nats_url, tmp_path)
    try:
        await wait_for(lambda: installed(restarted, "rmsnorm") == {fast.candidate_id})
        demoted = ev.KernelDemoted(candidate_id=fast.candidate_id, slot="rmsnorm", model="llama-tiny",
                                   reason="regressed")
        registry.sign(demoted)
        await bus.publish(subjects.KERNEL_DEMOTED, demoted)
        await wait_for(lambda: installed(restarted, "rmsnorm") == {"reference"})
    finally:
        await stop_service(restarted, restarted_bus)
