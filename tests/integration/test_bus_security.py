"""The bus on the real stack: every client authenticates, and each identity may publish only its own
subjects. Forged credentials do not connect; the observer publishes nothing; a forged benchmark and
verdict chain from an identity that is not the engine's or the verifier's never reaches anyone; and a
message id planted ahead of the verifier's cannot suppress the genuine verdict."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nats.errors import NoRespondersError, TimeoutError

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import identities, subjects
from services.common.signing import Signer
from services.common.slot_specs import candidate_id
from services.console import client, tables
from tests.engine_host.candidates import ROPE_COMPLEX, source
from tests.integration.conftest import wait_ready

pytestmark = pytest.mark.timeout(600)


async def _refused(url: str, subject: str, payload: bytes) -> bool:
    """True when a JetStream publish as this identity gets no ack (the server dropped it)."""
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(subject, payload, timeout=1.5)
        return False
    except (TimeoutError, NoRespondersError, nats.js.errors.APIError):
        return True
    finally:
        await nc.close()


async def test_only_the_owner_of_a_subject_can_publish_and_forgeries_change_nothing(stack) -> None:
    await wait_ready(stack)
    host_port = stack.nats.url.removeprefix("nats://")
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await nats.connect(f"nats://registry:not-the-password@{host_port}", max_reconnect_attempts=0,
                           allow_reconnect=False, connect_timeout=3)
    with pytest.raises(Exception, match=r"[Aa]uthorization"):
        await nats.connect(stack.nats.url, max_reconnect_attempts=0, allow_reconnect=False, connect_timeout=3)

    src = source("rope", ROPE_COMPLEX)
    cid = candidate_id("rope", src)
    forged_verdict = ev.Verdict(candidate_id=cid, slot="rope", status=ev.VERDICT_STATUS_FAILED,
                                failed_stage="end_to_end", reason="forged")
    forged_bench = ev.BenchmarkResult(candidate_id=cid, slot="rope", status=ev.BENCH_STATUS_OK, speedup=99.0,
                                      speedup_lo=98.0)
    promotion = ev.KernelPromoted(candidate_id=cid, slot="rope", source=src)
    for who in ("observer", "operator", "traffic", "agent_pool"):
        url = stack.url_for(who)
        assert await _refused(url, subjects.KERNEL_PROMOTED, promotion.SerializeToString()), who
        assert await _refused(url, subjects.CANDIDATES_VERIFIED, forged_verdict.SerializeToString()), who
        assert await _refused(url, subjects.CANDIDATES_BENCHMARKED, forged_bench.SerializeToString()), who
    assert await _refused(stack.url_for("observer"), subjects.TRAFFIC_REQUESTS, b"")
    assert identities.publisher_of(subjects.CANDIDATES_VERIFIED) == "verifier"

    # the agent pool plants the verifier's message id in its own stream, then proposes the candidate
    agent = await nats.connect(stack.url_for("agent_pool"))
    js = agent.jetstream()
    await js.publish(subjects.CANDIDATES_PROPOSED, forged_verdict.SerializeToString(),
                     headers={"Nats-Msg-Id": f"{subjects.CANDIDATES_VERIFIED}:{cid}"})
    cand = ev.Candidate(candidate_id=cid, campaign_id="sec", slot="rope", source=src, backend=ev.BACKEND_TORCH,
                        model="llama-tiny", agent="test")
    await js.publish(subjects.CANDIDATES_PROPOSED, cand.SerializeToString(),
                     headers={"Nats-Msg-Id": f"{subjects.CANDIDATES_PROPOSED}:{cid}"})
    await agent.close()
    deadline = time.monotonic() + 400
    verdict: list[dict] = []
    while not verdict:
        assert time.monotonic() < deadline, "no verdict stored"
        await asyncio.sleep(2)
        reply = await client.sql(stack.nats_url, f"select status, reason from verdicts where candidate_id = '{cid}'")
        verdict = tables.rows(reply) if not reply.error else []
    assert verdict[0]["status"] == "passed", verdict  # the genuine one, not the planted "forged"
    benches = tables.rows(await client.sql(stack.nats_url,
                                           f"select speedup from benchmarks where candidate_id = '{cid}'"))
    assert benches and float(benches[0]["speedup"]) < 50  # the engine's measurement, not the forged 99


async def test_with_the_registrys_bus_credential_but_not_its_key_nothing_installs(stack) -> None:
    await wait_ready(stack)
    src = source("silu_mul", "def kernel(gate, up):\n    return torch.relu(gate) * up\n")  # wrong on purpose
    cid = candidate_id("silu_mul", src)
    base = dict(candidate_id=cid, slot="silu_mul", model="llama-tiny", source=src, backend=ev.BACKEND_TORCH)
    impostor = Signer(Ed25519PrivateKey.generate())
    forged, unsigned, altered = ev.KernelPromoted(**base), ev.KernelPromoted(**base), ev.KernelPromoted(**base)
    impostor.sign(forged)
    real = Signer.load_or_create(stack.data_dir / "registry")  # the registry's own key, read from its files
    real.sign(altered)
    altered.source = src.replace("relu", "tanh")  # the signature covers the source hash: it no longer verifies
    registry = await nats.connect(stack.url_for("registry"))  # a stolen bus credential
    js = registry.jetstream()
    for i, msg in enumerate((forged, unsigned, altered)):
        await js.publish(subjects.KERNEL_PROMOTED, msg.SerializeToString(),
                         headers={"Nats-Msg-Id": f"forged-{i}"})
    await registry.close()
    log = stack.log_dir / "engine_host.log"
    deadline = time.monotonic() + 60
    while log.read_text().count("kernel event refused") < 3:
        assert time.monotonic() < deadline, "the engine did not refuse the forged promotions"
        await asyncio.sleep(0.5)
    installed = tables.rows(await client.sql(stack.nats_url, "select count(*) as n from promotions"))
    assert installed[0]["n"] in (0, "0")  # the registry never promoted it either
