"""Cheats and honest rewrites through the whole loop on real parts: proposed on the bus as an agent
would, benchmarked by the engine host's fast tier, verified against its slow tier, decided by the
registry. No cheat is promoted and each stops at the stage its file names; a candidate that patches
torch at import changes nothing for the one benchmarked after it; honest rewrites pass, and a region
candidate goes proposed → benchmarked → verified → promoted → installed.

The verifier here verifies every benchmark that ran (not only wins), so that honest rewrites and
measured-honest cheats are judged too; promotion still needs a lower bound above 1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import engine_service_pb2_grpc as es_grpc
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.common.grpc_server import channel
from services.common.slot_specs import candidate_id
from services.console import client, tables
from services.console.stack import Stack
from services.verifier.engine_client import EngineClient
from tests.engine_host.candidates import ATTN_BLOCK_FAST
from tests.integration.conftest import STACK_ENV, wait_ready
from tests.verifier.adversarial_cases import CANARY, CASES, HONEST_CASES, Case

pytestmark = pytest.mark.timeout(1200)

CHEATS = ("patch_rsqrt_update_wrapper", "patch_sdpa_list_target", "sniff_call_counter", "deferred_thread_pool",
          "state_output_arena", "live_param_bf16", "shortcut_context_window", "ties_highest_index",
          "boundary_write_repo_canary", "reference_patch", "timer_patch")
HONEST = ("rmsnorm_functional", "rope_complex")
SHAPES = [ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=1, context_len=64, weight=0.5),
          ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=1, context_len=96, weight=0.5)]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path / "stack", port=-1, extra_env={**STACK_ENV, "POLYMORPH_VERIFIER_MIN_SPEEDUP_LO": "0",
                                             "POLYMORPH_VERIFIER_EXTRA_CALLS": "2000",
                                             "POLYMORPH_VERIFIER_E2E_PROMPTS": "2"})
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _candidate(op: str, source: str, name: str) -> ev.Candidate:
    return ev.Candidate(candidate_id=candidate_id(op, source), campaign_id="trust", slot=op, source=source,
                        backend=ev.BACKEND_TORCH, agent=name, model="llama-tiny", shapes=SHAPES)


async def _rows(stack: Stack, query: str) -> list[dict]:
    reply = await client.sql(stack.nats_url, query)
    assert not reply.error, reply.error
    return tables.rows(reply)


async def _settled(stack: Stack, ids: list[str], timeout_s: float) -> tuple[dict[str, dict], dict[str, dict]]:
    """Every candidate benchmarked, every ok benchmark verified and decided (benchmarks, verdicts by id)."""
    quoted = ", ".join(f"'{i}'" for i in ids)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            benches = {r["candidate_id"]: r for r in await _rows(
                stack, f"select candidate_id, status, reason, speedup, speedup_lo from benchmarks "
                       f"where candidate_id in ({quoted})")}
            verdicts = {r["candidate_id"]: r for r in await _rows(
                stack, f"select candidate_id, status, failed_stage, reason, decision from verdicts "
                       f"where candidate_id in ({quoted})")}
        except client.StackUnavailable:
            benches, verdicts = {}, {}
        ok = [i for i, b in benches.items() if b["status"] == "ok"]
        if len(benches) == len(ids) and all(i in verdicts and verdicts[i]["decision"] for i in ok):
            return benches, verdicts
        assert time.monotonic() < deadline, f"not settled: {len(benches)}/{len(ids)} benchmarked, " \
                                            f"{sum(i in verdicts for i in ok)}/{len(ok)} verified"
        await asyncio.sleep(2)


def _stage(bench: dict, verdict: dict | None, promoted: bool) -> str:
    if bench["status"] == "load_error":
        return "load"
    if bench["status"] != "ok":
        return "benchmark"
    assert verdict is not None
    if verdict["status"] == "failed":
        return str(verdict["failed_stage"])
    return "promoted" if promoted else "not_promoted"


async def test_cheats_never_ship_and_honest_kernels_and_regions_do(stack) -> None:
    await wait_ready(stack)
    by_name: dict[str, Case] = {c.name: c for c in [*CASES, *HONEST_CASES]}
    # the patching cheat first, an honest rmsnorm right after it: the second sees a fresh sandbox
    order = [by_name[n] for n in (*CHEATS[:1], *HONEST, *CHEATS[1:])]
    cands = [_candidate(c.op, c.source, c.name) for c in order]
    region = _candidate("attn_block", ATTN_BLOCK_FAST, "attn_block_fast")
    bus = await Bus.connect(stack.url_for("agent_pool"), "trust-test")  # as the agent pool would
    try:
        for cand in [*cands, region]:
            await bus.publish(subjects.CANDIDATES_PROPOSED, cand, msg_id=cand.candidate_id)
    finally:
        await bus.close()
    ids = [c.candidate_id for c in [*cands, region]]
    benches, verdicts = await _settled(stack, ids, timeout_s=900)
    promoted = {r["candidate_id"] for r in await _rows(stack, "select candidate_id from promotions")}

    outcome = {case.name: _stage(benches[c.candidate_id], verdicts.get(c.candidate_id), c.candidate_id in promoted)
               for case, c in zip(order, cands, strict=True)}
    for name in CHEATS:
        case = by_name[name]
        # the loop benchmarks before it verifies: a cheat the static checks would stop may be stopped
        # by the benchmark first (at its `dynamic` stage)
        allowed = case.expected | (case.dynamic_stages & {"load", "benchmark"} if "static" in case.expected else set())
        assert outcome[name] != "promoted", f"{name} was promoted"
        assert outcome[name] in allowed, (name, outcome[name], verdicts.get(candidate_id(case.op, case.source)))
    for name in HONEST:
        assert outcome[name] in ("promoted", "not_promoted"), (name, outcome[name])
    assert outcome["rope_complex"] == "promoted"  # 4-8x on a CPU: one complex multiply
    assert not CANARY.exists()

    # the region: proposed → benchmarked → verified → promoted → installed on both tiers
    assert benches[region.candidate_id]["status"] == "ok", benches[region.candidate_id]
    assert verdicts[region.candidate_id]["status"] == "passed", verdicts[region.candidate_id]
    if region.candidate_id not in promoted:
        # honest but only a little faster on a CPU: on a loaded machine its benchmark may not show it
        # beyond the noise, and then the registry must say exactly that
        assert float(benches[region.candidate_id]["speedup_lo"]) <= 1.0, benches[region.candidate_id]
        decision = await _rows(stack, f"select decision, decision_reason from verdicts "
                                      f"where candidate_id = '{region.candidate_id}'")
        assert "not faster beyond the noise" in str(decision[0]["decision_reason"]), decision
        return
    address = await _engine_address(stack)
    async with channel(address) as ch:
        stub = es_grpc.EngineServiceStub(ch)
        deadline = time.monotonic() + 120
        while True:
            status = await stub.Status(es.StatusRequest())
            held = [{s.slot: s.candidate_id for s in t.slots}.get("attn_block") for t in status.tiers]
            if all(h == region.candidate_id for h in held):
                break
            assert time.monotonic() < deadline, held
            await asyncio.sleep(1)


async def _engine_address(stack: Stack) -> str:
    bus = await Bus.connect(stack.nats_url, "trust-test-discover", manage_streams=False)
    try:
        discovering = EngineClient(bus, "llama-tiny", discover_timeout_s=5.0)
        await discovering.stub()
        assert discovering._address is not None
        address = discovering._address
        await discovering.close()
        return address
    finally:
        await bus.close()
