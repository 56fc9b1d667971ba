"""The engine through gRPC on port 0, with real harness and sandbox processes: failures, timing,
RunSlot, Generate, regions, the trust boundary.

One engine (fast + slow tier) serves the whole module; every test leaves the op table as it found it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
import torch

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import engine_service_pb2_grpc as es_grpc
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.grpc_server import channel, mark_serving
from services.common.shapes import Shape
from services.engine_host.config import EngineHostConfig
from services.engine_host.engine import Engine
from services.engine_host.grpc_api import SERVICE_NAME, build_server
from tests.engine_host import candidates as C

pytestmark = pytest.mark.asyncio(loop_scope="module")

SMALL = [ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=3, context_len=37, weight=1.0)]


def decode_tensor(t: es.TensorProto) -> torch.Tensor:
    return torch.frombuffer(bytearray(t.data), dtype=torch.uint8).view(getattr(torch, t.dtype)).reshape(*t.shape)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Engine]:
    data_dir: Path = tmp_path_factory.mktemp("engine")
    config = EngineHostConfig(engine_id="test-engine", device="cpu", candidate_timeout_s=3.0,
                              rounds=6, samples=3, sample_s=5e-4,
                              default_shapes=(Shape("decode", 1, 64, 0.6), Shape("decode", 4, 96, 0.4)))
    eng = Engine(config, "llama-tiny", data_dir)
    await eng.start()
    yield eng
    await eng.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stub(engine: Engine) -> AsyncIterator[es_grpc.EngineServiceStub]:
    server, port, health = build_server(engine)
    await server.start()
    await mark_serving(health, (SERVICE_NAME,))
    async with channel(f"127.0.0.1:{port}") as ch:
        yield es_grpc.EngineServiceStub(ch)
    await server.stop(1.0)


async def bench(stub, body: str, slot: str = "rmsnorm", **kw) -> ev.BenchmarkResult:
    return await stub.Benchmark(es.BenchmarkRequest(candidate=C.candidate(slot, body), **kw))


async def test_status_describes_both_tiers(stub) -> None:
    status = await stub.Status(es.StatusRequest())
    assert status.model == "llama-tiny" and status.device == "cpu" and status.hardware
    tiers = {t.tier: t for t in status.tiers}
    assert tiers[es.TIER_FAST].layers == 2 and tiers[es.TIER_SLOW].layers == 4
    assert all(t.worker_alive and t.worker_start_s > 0 for t in tiers.values())
    slots = {s.slot: s for s in tiers[es.TIER_FAST].slots}
    assert slots["rmsnorm"].candidate_id == "reference" and "eps" in slots["rmsnorm"].signature


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (C.RAISES, ev.BENCH_STATUS_RAISED, "RuntimeError: kernel exploded on purpose"),
        (C.RMSNORM_WRONG, ev.BENCH_STATUS_WRONG_OUTPUT, "> tolerance"),
        ("def kernel(x, weight, eps)\n", ev.BENCH_STATUS_LOAD_ERROR, "syntax error"),
        (C.SEGFAULT, ev.BENCH_STATUS_CRASHED, "SIGSEGV"),
        (C.KILL9, ev.BENCH_STATUS_CRASHED, "SIGKILL"),
        (C.HANG, ev.BENCH_STATUS_TIMEOUT, "no progress for 3 s"),
    ],
    ids=["raises", "wrong", "load-error", "segfault", "kill9", "hang"],
)
async def test_bad_candidates_are_recorded_and_the_host_keeps_serving(
        engine: Engine, stub, body: str, status: int, reason: str) -> None:
    before = engine.tiers["fast"].restarts
    result = await bench(stub, body, shapes=SMALL)
    assert result.status == status, result.reason
    assert reason in result.reason
    assert result.tier == "fast" and result.engine_id == "test-engine" and result.incumbent_id == "reference"
    assert engine.tiers["fast"].restarts == before  # only the candidate's sandbox went: the harness stays
    good = await bench(stub, C.RMSNORM_FAST, shapes=SMALL, rounds=3)  # the host goes on
    assert good.status == ev.BENCH_STATUS_OK, good.reason


async def test_an_aa_comparison_is_never_a_win(stub) -> None:
    result = await bench(stub, C.RMSNORM_REF)
    assert result.status == ev.BENCH_STATUS_OK, result.reason
    assert result.speedup_lo <= 1.0 <= result.speedup_hi
    assert result.aa_spread >= 0 and result.incumbent.runs > 0 and result.candidate.median_us > 0


async def test_caching_or_deferred_results_win_nothing(stub) -> None:
    honest = await bench(stub, C.RMSNORM_REF)  # the same computation without the trick: an A/A
    content = await bench(stub, C.RMSNORM_CONTENT_CACHE)  # every call's inputs are fresh: it never hits
    assert honest.status == content.status == ev.BENCH_STATUS_OK, (honest.reason, content.reason)
    assert content.speedup_lo <= 1.0 and content.speedup <= honest.speedup_hi, (content, honest)
    pointer = await bench(stub, C.RMSNORM_POINTER_CACHE)  # hits on reused buffers: stale outputs
    assert pointer.status == ev.BENCH_STATUS_WRONG_OUTPUT, pointer.reason
    deferred = await bench(stub, C.RMSNORM_DEFERRED)
    assert deferred.status == ev.BENCH_STATUS_WRONG_OUTPUT, deferred.reason


async def test_a_genuinely_faster_kernel_wins(stub) -> None:
    result = await bench(stub, C.ROPE_COMPLEX, slot="rope")
    assert result.status == ev.BENCH_STATUS_OK, result.reason
    assert result.speedup_lo > 1.0, result
    assert result.speedup_vs_reference == pytest.approx(result.speedup)  # the incumbent is the reference


async def test_a_triton_candidate_runs_in_the_interpreter(stub) -> None:
    result = await bench(stub, C.RMSNORM_TRITON, shapes=SMALL, rounds=2)
    assert result.status == ev.BENCH_STATUS_OK, result.reason


async def test_swap_and_rollback_change_what_the_tiers_hold(stub) -> None:
    cand = C.candidate("silu_mul", C.SILU_MUL_FAST)
    reply = await stub.SwapKernel(es.SwapKernelRequest(candidate=cand))
    assert reply.ok and reply.previous_id == "reference" and reply.installed_id == cand.candidate_id
    status = await stub.Status(es.StatusRequest())
    for tier in status.tiers:
        assert {s.slot: s.candidate_id for s in tier.slots}["silu_mul"] == cand.candidate_id
    # the incumbent is now the candidate: benchmarking against itself is an A/A
    again = await stub.Benchmark(es.BenchmarkRequest(candidate=cand, shapes=SMALL, rounds=3))
    assert again.incumbent_id == cand.candidate_id
    back = await stub.Rollback(es.RollbackRequest(slot="silu_mul"))
    assert back.ok and back.previous_id == cand.candidate_id and back.installed_id == "reference"
    bad = await stub.SwapKernel(es.SwapKernelRequest(candidate=C.candidate("rmsnorm", "kernel = 1\n")))
    assert not bad.ok and bad.status == es.RUN_STATUS_LOAD_ERROR and "not callable" in bad.error
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Rollback(es.RollbackRequest(slot="nope"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_run_slot_on_captured_and_random_inputs(stub) -> None:
    cand = C.candidate("rmsnorm", C.RMSNORM_FAST)
    captured = await stub.RunSlot(es.RunSlotRequest(candidate=cand, source=es.INPUT_SOURCE_CAPTURED))
    assert captured.status == es.RUN_STATUS_OK and captured.runs, captured.error
    for run in captured.runs:
        assert run.input_id.startswith("captured:") and not run.inputs_mutated
        ref, first, second = (decode_tensor(t) for t in (run.reference, run.first, run.second))
        torch.testing.assert_close(first, ref)
        torch.testing.assert_close(second, ref)
    odd = ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=3, context_len=37)
    random = await stub.RunSlot(es.RunSlotRequest(candidate=C.candidate("add_rmsnorm", """
def kernel(x, residual, weight, eps):
    residual.add_(x)  # mutates its input
    xf = residual.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight, residual
"""), source=es.INPUT_SOURCE_RANDOM, shapes=[odd], seed=5))
    assert random.status == es.RUN_STATUS_OK
    run, stress = random.runs  # plain values, then the same shapes with outliers
    assert run.input_id.startswith("random:prefill:b3:t37") and run.inputs_mutated
    assert stress.input_id.startswith("stress:prefill:b3:t37")
    ref, first, second = (decode_tensor(t) for t in (run.reference, run.first, run.second))
    assert ref.shape == (2, 3, 37, 256)  # two outputs, stacked
    torch.testing.assert_close(first, ref)
    assert not torch.allclose(second, ref)  # the second run saw the mutated residual
    reference_only = await stub.RunSlot(es.RunSlotRequest(candidate=ev.Candidate(slot="sample"),
                                                          source=es.INPUT_SOURCE_CAPTURED, max_inputs=1))
    (only,) = reference_only.runs
    assert decode_tensor(only.reference).dtype == torch.int64 and not only.HasField("first")
    crashed = await stub.RunSlot(es.RunSlotRequest(candidate=C.candidate("rmsnorm", C.SEGFAULT)))
    assert crashed.status == es.RUN_STATUS_CRASHED and "SIGSEGV" in crashed.error


async def test_generate_reference_vs_override(stub) -> None:
    prompt = [5, 17, 300, 2000, 42, 7]
    ref = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=8, reference_only=True, return_logits=True))
    assert ref.status == es.RUN_STATUS_OK and len(ref.tokens) == 8
    logits = decode_tensor(ref.logits)
    assert logits.shape == (8, 2048) and logits.dtype == torch.float32
    assert logits.argmax(-1).tolist() == list(ref.tokens)
    same = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=8, overrides=[
        C.candidate("rmsnorm", C.RMSNORM_FAST)], return_logits=True))
    assert list(same.tokens) == list(ref.tokens)
    torch.testing.assert_close(decode_tensor(same.logits), logits, atol=1e-4, rtol=1e-4)
    wrong = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=8, overrides=[
        C.candidate("sample", C.SAMPLE_WRONG)]))
    assert list(wrong.tokens) != list(ref.tokens)
    after = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=8))  # overrides were rolled back
    assert list(after.tokens) == list(ref.tokens)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Generate(es.GenerateRequest(prompt=[999_999], steps=2))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_profile_reports_every_slot_and_region(stub) -> None:
    longer = ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=3, context_len=74, weight=1.0)
    shapes = [*SMALL, longer, ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=2, context_len=9, weight=1.0)]
    reply = await stub.Profile(es.ProfileRequest(shapes=shapes))
    assert {t.slot for t in reply.times} == {"rmsnorm", "add_rmsnorm", "rope", "attention", "silu_mul",
                                             "linear", "sample", "attn_block", "mlp_block", "layer", "step"}
    assert reply.step_us > 0 and all(t.median_us > 0 and t.calls_per_step >= 1 for t in reply.times)
    per = {(t.slot, t.shape.batch_size, t.shape.context_len): t for t in reply.times}
    linear = next(t for t in reply.times if t.slot == "linear")
    assert linear.calls_per_step == 5 * 4 + 1  # qkv, o, w1, w3, w2 in each of 4 layers + the LM head
    for shape in shapes:
        at = {op: per[(op, shape.batch_size, shape.context_len)] for op in ("mlp_block", "layer", "step", "silu_mul")}
        assert at["mlp_block"].calls_per_step == at["layer"].calls_per_step == 4 and at["step"].calls_per_step == 1
        # a region's time holds the slots it nests: silu_mul < mlp_block < layer x 4 < step
        assert at["silu_mul"].median_us < at["mlp_block"].median_us < at["layer"].median_us < at["step"].median_us
    # floors: the bytes each slot's and region's calls move over the measured copy bandwidth; a region
    # moves at least what the slots inside it read as weights (the whole step: every linear's weight)
    assert reply.copy_bandwidth_gb_s > 0 and all(t.floor_us > 0 for t in reply.times)
    for shape in shapes:
        floor = {t.slot: t.floor_us for t in reply.times
                 if (t.shape.batch_size, t.shape.context_len) == (shape.batch_size, shape.context_len)}
        assert floor["mlp_block"] < floor["layer"] < floor["step"] and floor["attn_block"] < floor["layer"]
    # attention reads the live K/V prefix: twice the context, about twice its bytes; linear's do not move
    at = {(t.slot, t.shape.context_len): t.floor_us for t in reply.times if t.shape.phase == ev.PHASE_DECODE}
    assert 1.8 < at[("attention", 74)] / at[("attention", 37)] < 2.1
    assert at[("linear", 74)] == pytest.approx(at[("linear", 37)], rel=0.05)
    # each shape's own step, and the tokens/s it gives (a prefill step computes batch x prompt tokens)
    steps = {(s.shape.phase, s.shape.batch_size, s.shape.context_len): s for s in reply.steps}
    assert len(steps) == len(shapes)
    for shape in shapes:
        st = steps[(shape.phase, shape.batch_size, shape.context_len)]
        new = 1 if shape.phase == ev.PHASE_DECODE else shape.context_len
        assert st.step_us > 0 and st.tokens_per_s == pytest.approx(shape.batch_size * new / (st.step_us * 1e-6))


async def test_sandbox_crashes_leave_the_live_engine_and_a_dead_harness_comes_back(engine: Engine, stub) -> None:
    prompt = [11, 12, 13, 14]
    ref = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=6, reference_only=True))
    wrong = C.candidate("sample", C.SAMPLE_WRONG)
    assert (await stub.SwapKernel(es.SwapKernelRequest(candidate=wrong, tier=es.TIER_SLOW))).ok
    try:
        before = engine.tiers["slow"].restarts
        crashed = await stub.RunSlot(es.RunSlotRequest(candidate=C.candidate("rmsnorm", C.KILL9),
                                                       tier=es.TIER_SLOW))
        assert crashed.status == es.RUN_STATUS_CRASHED and engine.tiers["slow"].restarts == before
        served = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=6, tier=es.TIER_SLOW))
        assert served.status == es.RUN_STATUS_OK and list(served.tokens) != list(ref.tokens)  # still installed
        os.kill(engine.tiers["slow"].child.pid, signal.SIGKILL)  # the harness itself: the tier restarts it
        engine.tiers["slow"].child.process.join(10)
        after = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=6, tier=es.TIER_SLOW))
        assert after.status == es.RUN_STATUS_OK and engine.tiers["slow"].restarts == before + 1
        assert list(after.tokens) != list(ref.tokens)  # the argmin sampler came back with the new harness
    finally:
        await stub.Rollback(es.RollbackRequest(slot="sample", tier=es.TIER_SLOW))
    restored = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=6, tier=es.TIER_SLOW))
    assert list(restored.tokens) == list(ref.tokens)


async def test_sandboxes_are_confined(stub) -> None:
    status = await stub.Status(es.StatusRequest())
    for tier in status.tiers:
        measures = dict(tier.containment)
        assert measures["dies_with_parent"] == "on" and measures["private_dir"] == "on"
        if os.geteuid() == 0:  # CI and the GPU machine run as root: every measure must hold there
            assert all(v.startswith("on") for v in measures.values()), measures


async def test_an_import_time_patch_changes_nothing_for_the_next_candidate(stub) -> None:
    # rewrites torch.rsqrt for the whole process at import: the reference would agree with it if it ran there
    patched = C.candidate("rmsnorm", """
torch.rsqrt = lambda t: torch.ones_like(t)
F.rms_norm = lambda x, shape, weight=None, eps=None: x * weight
def kernel(x, weight, eps):
    return x * weight
""")
    result = await stub.Benchmark(es.BenchmarkRequest(candidate=patched, shapes=SMALL, rounds=2))
    assert result.status == ev.BENCH_STATUS_WRONG_OUTPUT, result.reason
    after = await bench(stub, C.RMSNORM_REF, shapes=SMALL, rounds=3)  # the next one: a fresh sandbox
    assert after.status == ev.BENCH_STATUS_OK and after.speedup_lo <= 1.0 <= after.speedup_hi


async def test_a_region_candidate_is_benchmarked_and_installed_like_a_slot(stub) -> None:
    region = ev.Candidate(slot="mlp_block", source=C.MLP_BLOCK_FUSED)
    result = await stub.Benchmark(es.BenchmarkRequest(candidate=region, shapes=SMALL, rounds=2))
    assert result.status == ev.BENCH_STATUS_OK, result.reason
    assert result.speedup > 0 and result.checked_calls > 0
    wrong = await stub.Benchmark(es.BenchmarkRequest(candidate=ev.Candidate(
        slot="mlp_block", source=C.MLP_BLOCK_FUSED.replace("F.silu(", "torch.relu(")), shapes=SMALL, rounds=2))
    assert wrong.status == ev.BENCH_STATUS_WRONG_OUTPUT, wrong.reason
    swapped = await stub.SwapKernel(es.SwapKernelRequest(candidate=region))
    assert swapped.ok, swapped.error
    try:
        prompt = [3, 1, 4, 1, 5]
        ref = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=5, reference_only=True))
        live = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=5))
        assert list(live.tokens) == list(ref.tokens)
        status = await stub.Status(es.StatusRequest())
        assert all({s.slot: s.candidate_id for s in t.slots}["mlp_block"] != "reference" for t in status.tiers)
    finally:
        assert (await stub.Rollback(es.RollbackRequest(slot="mlp_block"))).ok
