"""Stages 2-4 against a real slow-tier engine host over gRPC (llama-tiny on CPU).

An honest faster kernel passes every stage; every adversarial candidate that gets past the static
checks fails at the stage its file names; the engine stages also catch several static-only cheats on
their own (defence in depth); a worker crash or hang is a FAILED verdict, not a retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.verifier.cascade import STAGES, CascadeSettings, run_cascade, run_dynamic_stages
from services.verifier.engine_client import EngineClient, EngineUnavailable
from tests.verifier.adversarial_cases import CASES, DYNAMIC_CASES, HONEST_RMSNORM
from tests.verifier.helpers import MODEL, EngineHost, candidate

SETTINGS = CascadeSettings(e2e_steps=8, e2e_prompts=3)


@pytest.fixture
async def engine(engine_host: EngineHost) -> AsyncIterator[EngineClient]:
    client = EngineClient(None, MODEL, address=engine_host.address, rpc_timeout_s=120)
    yield client
    await client.close()


async def test_honest_faster_kernel_passes_every_stage(engine: EngineClient) -> None:
    outcome = await run_cascade(candidate(HONEST_RMSNORM), engine, SETTINGS, seed=4242)
    assert outcome.passed, outcome.reason
    assert [c.stage for c in outcome.checks] == list(STAGES)
    by_stage = {c.stage: c for c in outcome.checks}
    assert by_stage["captured"].rel_err < 1e-5
    assert "seed 4242" in by_stage["random"].detail and "decode:3x37" in by_stage["random"].detail
    assert "3 prompts x 8 greedy steps: tokens agree" in by_stage["end_to_end"].detail


@pytest.mark.parametrize("case", DYNAMIC_CASES, ids=lambda c: c.name)
async def test_adversarial_candidate_fails_at_its_stage(engine: EngineClient, case) -> None:
    outcome = await run_cascade(candidate(case.source), engine, SETTINGS, seed=977)
    assert not outcome.passed
    assert outcome.failure is not None
    assert outcome.failure.stage == case.expect, outcome.reason
    stages = [c.stage for c in outcome.checks]
    assert stages == list(STAGES[: STAGES.index(case.expect) + 1])  # stopped at the first failure


@pytest.mark.parametrize(("name", "expected"), [
    ("result_reuse_cache", "captured"),  # the cache serves the second captured input
    ("result_reuse_global", "captured"),
    ("precision_half", "captured"),  # float16 compute misses the float32 budget
    ("crash_ctypes", "captured"),  # segfaults the worker: CRASHED, worker restarted
])
async def test_engine_stages_catch_static_cheats_too(engine: EngineClient, name: str, expected: str) -> None:
    source = next(c.source for c in CASES if c.name == name)
    outcome = await run_dynamic_stages(candidate(source), engine, SETTINGS, seed=31)
    assert outcome.failure is not None and outcome.failure.stage == expected, outcome.reason
    if name == "crash_ctypes":
        assert "crashed" in outcome.reason and "worker restarted" in outcome.reason
    # the engine is still serving (and a restarted worker still verifies honest kernels)
    assert (await run_cascade(candidate(HONEST_RMSNORM), engine, SETTINGS, seed=5)).passed


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
