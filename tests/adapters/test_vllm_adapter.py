"""The vLLM adapter's parts that need no vLLM: the worker's op table and its check, the sidecar's
handling of signed promotions, the traffic publisher; real nats-server, real signing, real torch.
The live test with a real vLLM server is test_vllm_live.py (`make test-vllm`)."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import threading
import time
from pathlib import Path

import nats
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.adapters.vllm.settings import AdapterSettings
from services.adapters.vllm.sidecar import Sidecar
from services.adapters.vllm.table import NATIVE, ServingTable
from services.adapters.vllm.traffic import TrafficPublisher
from services.common import identities, subjects
from services.common.bus import Bus
from services.common.nats_server import EmbeddedNats
from services.common.signing import Signer, encode_public
from services.engine_host.loader import load_candidate
from tests.adapters.kernels import RMSNORM, WRONG_RMSNORM, ids

HARDWARE = "test-cpu"


def native_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Stands in for vLLM's own op: what the adapter checks a kernel against."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def serve(table: ServingTable, rows: int = 5) -> torch.Tensor:
    x = torch.randn(1, rows, 64, dtype=torch.bfloat16)
    return table.call("rmsnorm", native_rmsnorm, x, torch.rand(64, dtype=torch.bfloat16) + 0.5, 1e-5)


def settings(tmp_path: Path, signer: Signer, **kw: object) -> AdapterSettings:
    base = AdapterSettings(nats_url="", model="llama-tiny", hardware=HARDWARE,
                           registry_key=encode_public(signer.private.public_key()), registry_key_file="",
                           state_dir=tmp_path / "state", swaps=True, traffic_tag="", traffic_queue=100)
    return dataclasses.replace(base, **kw)


def promoted(signer: Signer | None, source: str, cid: str, **kw: object) -> bytes:
    msg = ev.KernelPromoted(candidate_id=cid, slot="rmsnorm", model="llama-tiny", hardware=HARDWARE,
                            source=source, backend=ev.BACKEND_TORCH, promoted_unix=time.time())
    for k, v in kw.items():
        setattr(msg, k, v)
    if signer is not None:
        signer.sign(msg)
    return msg.SerializeToString()


def demoted(signer: Signer, cid: str) -> bytes:
    msg = ev.KernelDemoted(candidate_id=cid, slot="rmsnorm", model="llama-tiny", hardware=HARDWARE,
                           reason="rolled back", demoted_unix=time.time())
    signer.sign(msg)
    return msg.SerializeToString()


def test_the_table_runs_vllms_op_until_a_kernel_passes_its_check() -> None:
    table = ServingTable(keep_inputs=2)
    for rows in (3, 3, 7, 9):
        serve(table, rows)
    assert table.installed_id("rmsnorm") == NATIVE and table.calls[("rmsnorm", NATIVE)] == 4
    assert len(table.recorded("rmsnorm")) == 2  # one set per distinct shape, the first two seen
    good = load_candidate(RMSNORM, "rmsnorm", Path(tempfile.mkdtemp()))
    wrong = load_candidate(WRONG_RMSNORM, "rmsnorm", Path(tempfile.mkdtemp()))
    assert table.check("rmsnorm", good.kernel).passed
    verdict = table.check("rmsnorm", wrong.kernel)
    assert not verdict.passed and "rel_err" in verdict.detail

    def raises(x, weight, eps):
        raise RuntimeError("boom")

    assert "raised RuntimeError" in table.check("rmsnorm", raises).detail
    assert not ServingTable().check("rmsnorm", good.kernel).passed  # nothing recorded: nothing to judge on
    table.install("rmsnorm", good.candidate_id, good.kernel)
    installed_at = time.time()
    out = serve(table)
    assert table.calls[("rmsnorm", good.candidate_id)] == 1 and out.dtype == torch.bfloat16
    first = table.state()["slots"]["rmsnorm"]["first_call_unix"]
    assert first[good.candidate_id] >= installed_at and first[NATIVE] <= installed_at  # when it was first served
    table.restore("rmsnorm")
    serve(table)
    assert table.calls[("rmsnorm", NATIVE)] == 5
    assert [e["action"] for e in table.state()["events"]] == ["installed", "restored"]


def test_a_slot_with_nothing_installed_runs_vllms_op_directly_once_its_inputs_are_sampled() -> None:
    table = ServingTable(keep_inputs=2, sample_calls=3)
    serve(table, 3)
    assert not table.serves_native("rmsnorm")  # one shape of two held: keep building the slot form
    serve(table, 5)
    assert table.serves_native("rmsnorm") and table.calls[("rmsnorm", NATIVE)] == 3  # the direct call counts
    one_shape = ServingTable(keep_inputs=2, sample_calls=3)
    for _ in range(3):
        serve(one_shape, 3)
    assert one_shape.serves_native("rmsnorm", 2)  # a worker that only ever sees one shape stops sampling
    assert one_shape.calls[("rmsnorm", NATIVE)] == 5
    good = load_candidate(RMSNORM, "rmsnorm", Path(tempfile.mkdtemp()))
    table.install("rmsnorm", good.candidate_id, good.kernel)
    assert not table.serves_native("rmsnorm")  # an installed kernel is always called through the table
    table.restore("rmsnorm")
    assert table.serves_native("rmsnorm")


def test_the_sidecar_serves_only_signed_checked_promotions_for_its_model_and_hardware(tmp_path: Path) -> None:
    registry = Signer(Ed25519PrivateKey.generate())
    table = ServingTable()
    car = Sidecar(table, settings(tmp_path, registry), HARDWARE, "eager")
    good_id, wrong_id = ids()
    # before the worker served anything the promotion waits: there is nothing to check it on
    car.handle(subjects.KERNEL_PROMOTED, promoted(registry, RMSNORM, good_id), seq=1)
    assert car.waiting == {"rmsnorm"} and table.installed_id("rmsnorm") == NATIVE
    serve(table)
    car.apply("rmsnorm")
    assert table.installed_id("rmsnorm") == good_id and not car.waiting
    # forged, unsigned, altered, malformed: refused and counted; the installed kernel stays
    impostor = Signer(Ed25519PrivateKey.generate())
    car.handle(subjects.KERNEL_PROMOTED, promoted(impostor, WRONG_RMSNORM, wrong_id), seq=2)
    car.handle(subjects.KERNEL_PROMOTED, promoted(None, WRONG_RMSNORM, wrong_id), seq=3)
    altered = ev.KernelPromoted.FromString(promoted(registry, RMSNORM, good_id))
    altered.source = WRONG_RMSNORM
    car.handle(subjects.KERNEL_PROMOTED, altered.SerializeToString(), seq=4)
    car.handle(subjects.KERNEL_PROMOTED, b"\xff\x00garbage", seq=5)
    assert car.refused_events == 4 and table.installed_id("rmsnorm") == good_id
    # another model's or another chip's promotion is not this worker's
    car.handle(subjects.KERNEL_PROMOTED, promoted(registry, WRONG_RMSNORM, wrong_id, model="llama-3.2-1b"), seq=6)
    car.handle(subjects.KERNEL_PROMOTED, promoted(registry, WRONG_RMSNORM, wrong_id, hardware="H100"), seq=7)
    assert table.installed_id("rmsnorm") == good_id and car.refused_events == 4
    # a genuinely signed kernel that computes something else is refused by the check, never served
    car.handle(subjects.KERNEL_PROMOTED, promoted(registry, WRONG_RMSNORM, wrong_id), seq=8)
    assert wrong_id in car.refused_ids and table.installed_id("rmsnorm") == NATIVE
    assert table.calls.get(("rmsnorm", wrong_id), 0) == 0
    # its demotion brings back the earlier promotion, which passed here; that one's demotion, vLLM's op
    car.handle(subjects.KERNEL_DEMOTED, demoted(registry, wrong_id), seq=9)
    assert table.installed_id("rmsnorm") == good_id
    car.handle(subjects.KERNEL_DEMOTED, demoted(registry, good_id), seq=10)
    assert table.installed_id("rmsnorm") == NATIVE
    state = car.state()
    assert state["refused_events"] == 4 and wrong_id in state["refused"]


def test_without_a_bus_or_with_a_compiled_model_the_sidecar_follows_nothing(tmp_path: Path) -> None:
    registry = Signer(Ed25519PrivateKey.generate())
    assert "NATS_URL" in Sidecar(ServingTable(), settings(tmp_path, registry), HARDWARE, "eager")._follows()
    compiled = Sidecar(ServingTable(), settings(tmp_path, registry, nats_url="nats://x"), HARDWARE, "compiled")
    assert "--enforce-eager" in compiled._follows()


def test_traffic_never_blocks_serving_and_counts_what_it_drops(tmp_path: Path) -> None:
    registry = Signer(Ed25519PrivateKey.generate())
    # a bus that is not there: offering stays O(1), the queue keeps the newest, drops are counted
    publisher = TrafficPublisher(settings(tmp_path, registry, nats_url="nats://127.0.0.1:9", traffic_queue=50))
    began = time.perf_counter()
    for i in range(500):
        publisher.offer(ev.RequestRecord(arrival_s=i, prompt_tokens=10, output_tokens=5, request_id=f"r{i}"))
    assert time.perf_counter() - began < 5.0  # generous: a connect attempt would take seconds per call
    counters = publisher.counters()
    assert counters["queued"] == 50 and counters["dropped"] == 450 and counters["published"] == 0
    assert publisher.queue[-1].request_id == "r499"
    publisher.stop()
    # stopped means stopped: a client left retrying its first connection logged into later tests' stdout
    assert not [t for t in threading.enumerate() if t.name == "polymorph-traffic"]


async def test_traffic_reaches_the_stream_with_the_serving_identity_which_can_do_nothing_else(
        tmp_path: Path) -> None:
    creds = identities.generate(tmp_path / "creds")
    with EmbeddedNats(tmp_path / "nats", max_memory="64MB", max_storage="1GB", credentials=creds) as server:
        admin = await Bus.connect(identities.with_credentials(server.url, creds["registry"]), "streams")
        serving_url = identities.with_credentials(server.url, creds["serving"])
        registry = Signer(Ed25519PrivateKey.generate())
        publisher = TrafficPublisher(settings(tmp_path, registry, nats_url=serving_url))
        for i in range(20):
            publisher.offer(ev.RequestRecord(arrival_s=1000.0 + i, prompt_tokens=100 + i, output_tokens=7,
                                             model="llama-tiny", request_id=f"req-{i}"))
        deadline = time.monotonic() + 30
        while publisher.counters()["published"] < 20:
            assert time.monotonic() < deadline, publisher.counters()
            await asyncio.sleep(0.1)
        publisher.stop()
        info = await admin.js.stream_info(subjects.stream_for(subjects.TRAFFIC_REQUESTS))
        assert info.state.messages == 20
        # the serving credential cannot publish a promotion, nor delete a consumer (an engine's durable)
        await admin.js.add_consumer(subjects.stream_for(subjects.KERNEL_PROMOTED), durable_name="engine-x")
        serving = await nats.connect(serving_url)
        with pytest.raises(nats.errors.Error):  # the server refuses: no ack, a timeout
            await serving.jetstream().publish(subjects.KERNEL_PROMOTED, b"x", timeout=2.0)
        with pytest.raises(nats.errors.Error):
            await serving.jetstream().delete_consumer(subjects.stream_for(subjects.KERNEL_PROMOTED), "engine-x")
        await serving.close()
        kernels = await admin.js.stream_info(subjects.stream_for(subjects.KERNEL_PROMOTED))
        assert kernels.state.messages == 0 and kernels.state.consumer_count == 1
        await admin.close()
