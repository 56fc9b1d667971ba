"""The whole adversarial suite and every honest rewrite through the engine's real paths (llama-tiny on
the CPU): the fast tier's benchmark, then the verifier's cascade against the slow tier, then the
registry's promotion policy — the path a candidate takes through the loop, minus the bus.

The static (AST) checks are switched OFF here: each cheat must fail at its `dynamic` stage (or be
measured at its honest speed, so that the policy never promotes it) through isolation and measurement
alone. That its `expect` stage is `static` with the checks on is test_static_checks.py's business.
Every honest rewrite must pass every stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import pytest_asyncio

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.registry.policy import BenchFacts, decide_promotion
from services.verifier.cascade import STAGES, CascadeSettings, run_cascade, run_dynamic_stages
from services.verifier.engine_client import EngineClient, EngineUnavailable
from tests.verifier.adversarial_cases import CANARY, CASES, HONEST_CASES, HONEST_RMSNORM, Case
from tests.verifier.helpers import MODEL, EngineHost, candidate

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(2400)]

# further calls catch every cheat outside the rare-corruption family (which gets RARE): its counters
# and bombs go off within 64 calls, so 192 keep a 3x margin (512, capped at 5 s a case, held 5 of the
# suite's 20 minutes in the 48 cases that pass every check)
SETTINGS = CascadeSettings(e2e_steps=8, e2e_prompts=2, extra_calls=192, extra_s=3.0)
SHAPES = [ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=1, context_len=64, weight=0.6),
          ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=4, context_len=96, weight=0.4)]


# one in 2,000 calls corrupted: 20,000 checked calls miss it with probability e^-10
RARE = replace(SETTINGS, extra_calls=20_000, extra_s=60.0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine(engine_host: EngineHost) -> AsyncIterator[EngineClient]:
    client = EngineClient(None, MODEL, address=engine_host.address, rpc_timeout_s=300)
    yield client
    await client.close()


async def _benchmark(engine: EngineClient, case: Case) -> tuple[ev.Candidate, ev.BenchmarkResult]:
    cand = candidate(case.source, slot=case.op)
    cand.shapes.extend(SHAPES)
    stub = await engine.stub()
    bench = await stub.Benchmark(es.BenchmarkRequest(candidate=cand, tier=es.TIER_FAST, shapes=SHAPES, rounds=4),
                                 timeout=300)
    return cand, bench


async def _verify(engine: EngineClient, case: Case, cand: ev.Candidate, bench: ev.BenchmarkResult,
                  seed: int) -> tuple[str, str]:
    settings = RARE if case.family == "rare_corruption" else SETTINGS
    outcome = await run_dynamic_stages(cand, engine, settings, seed)
    if outcome.failure is not None:
        return outcome.failure.stage, outcome.reason
    facts = BenchFacts("ok", bench.speedup, bench.speedup_lo, bench.speedup_vs_reference, bench.incumbent_id)
    decision = decide_promotion(cand.candidate_id, "passed", facts, None)
    return ("promoted" if decision.promote else "not_promoted"), decision.reason


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def outcomes(engine: EngineClient) -> dict[str, tuple[str, str]]:
    """(stage, reason) per file: where the loop stops it with the static checks off, or 'not_promoted' /
    'promoted' when it passes every check. The fast tier benchmarks the next candidate while the slow
    tier verifies the last one, as in the running loop (two harnesses, two processes)."""
    results: dict[str, tuple[str, str]] = {}
    waiting: asyncio.Queue[tuple[Case, ev.Candidate, ev.BenchmarkResult] | None] = asyncio.Queue()

    async def benchmarks() -> None:
        for case in [*CASES, *HONEST_CASES]:
            cand, bench = await _benchmark(engine, case)
            if bench.status == ev.BENCH_STATUS_LOAD_ERROR:
                results[case.name] = ("load", bench.reason)
            elif bench.status != ev.BENCH_STATUS_OK:
                results[case.name] = ("benchmark", f"{ev.BenchStatus.Name(bench.status)}: {bench.reason}")
            else:
                await waiting.put((case, cand, bench))
        await waiting.put(None)

    async def verifications() -> None:
        while (item := await waiting.get()) is not None:
            case, cand, bench = item
            results[case.name] = await _verify(engine, case, cand, bench, seed=4242 if case.family == "honest" else 977)

    await asyncio.gather(benchmarks(), verifications())
    return results


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_every_cheat_fails_or_is_never_promoted_without_static_checks(outcomes, case: Case) -> None:
    stage, reason = outcomes[case.name]
    assert stage != "promoted", f"{case.name} would be promoted: {reason}"
    assert stage in case.dynamic_stages, f"{case.name}: stopped at {stage} ({reason}), expected {case.dynamic}"
    assert not CANARY.exists(), "a candidate wrote into the repository"


@pytest.mark.parametrize("case", HONEST_CASES, ids=lambda c: c.name)
async def test_no_honest_rewrite_is_rejected(outcomes, case: Case) -> None:
    stage, reason = outcomes[case.name]
    assert stage in ("promoted", "not_promoted"), f"{case.name} rejected at {stage}: {reason}"


async def test_honest_faster_kernel_passes_every_stage(engine: EngineClient) -> None:
    outcome = await run_cascade(candidate(HONEST_RMSNORM), engine, SETTINGS, seed=4242)
    assert outcome.passed, outcome.reason
    assert [c.stage for c in outcome.checks] == list(STAGES)
    by_stage = {c.stage: c for c in outcome.checks}
    assert by_stage["captured"].rel_err < 1e-5
    assert "seed 4242" in by_stage["random"].detail and "decode:3x37" in by_stage["random"].detail
    assert f"{SETTINGS.extra_calls} further calls on fresh inputs passed" in by_stage["random"].detail
    assert "2 prompts x 8 greedy steps: tokens agree" in by_stage["end_to_end"].detail


async def test_other_slots_and_load_errors(engine: EngineClient) -> None:
    silu = candidate('import torch\n\nSLOT = "silu_mul"\nBACKEND = "torch"\n\n\n'
                     "def kernel(gate, up):\n    return gate * torch.sigmoid(gate) * up\n", slot="silu_mul")
    outcome = await run_cascade(silu, engine, SETTINGS, seed=8)
    assert outcome.passed, outcome.reason
    broken = candidate('SLOT = "rmsnorm"\nBACKEND = "torch"\n\n\ndef kernel(x, weight, eps):\n'
                       "    return x\n\n\nraise ImportError('missing extension')\n")
    outcome = await run_cascade(broken, engine, SETTINGS, seed=8)
    assert outcome.failure is not None and outcome.failure.stage == "load"
    assert "missing extension" in outcome.reason


async def test_unreachable_engine_is_a_retry_not_a_verdict() -> None:
    client = EngineClient(None, MODEL, address="127.0.0.1:1", rpc_timeout_s=5)
    try:
        with pytest.raises(EngineUnavailable, match="RunSlot failed: UNAVAILABLE"):
            await run_cascade(candidate(HONEST_RMSNORM), client, SETTINGS, seed=1)
    finally:
        await client.close()
