"""The staged cascade, cheap first, stopping at the first failure:

static (AST) -> load -> captured (real inputs) -> random (odd shapes, fresh seed) -> race (second
run of every input) -> end_to_end (greedy tokens and logits on the slow tier).

Every stage that ran is recorded as a CheckResult. `EngineUnavailable` escapes: an engine that
cannot be reached says nothing about the candidate, so the caller retries instead of failing it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.shapes import Shape
from services.verifier.config import DEFAULT_RANDOM_SHAPES, VerifierConfig, parse_shapes
from services.verifier.correctness import (
    EngineProtocolError,
    check_extra_calls,
    check_outputs,
    failed,
    load_check,
    reference_dtype,
    status_failure,
)
from services.verifier.end_to_end import check_end_to_end, prompts_for
from services.verifier.engine_client import EngineClient, EngineUnavailable
from services.verifier.static_checks import check_source

STAGES = ("static", "load", "captured", "random", "race", "end_to_end")
_BACKENDS = {ev.BACKEND_TORCH: "torch", ev.BACKEND_TRITON: "triton", ev.BACKEND_COMPILE: "compile"}
_PHASES = {"decode": ev.PHASE_DECODE, "prefill": ev.PHASE_PREFILL}


@dataclass(frozen=True)
class CascadeSettings:
    e2e_steps: int = 8
    e2e_prompts: int = 3
    random_shapes: tuple[Shape, ...] = parse_shapes(DEFAULT_RANDOM_SHAPES)
    max_captured: int = 0
    input_dtype: str = "float32"
    extra_calls: int = 6000
    extra_s: float = 60.0  # a slow kernel (the CPU's Triton interpreter) gets as many as fit in this

    @classmethod
    def from_config(cls, config: VerifierConfig) -> CascadeSettings:
        return cls(config.e2e_steps, config.e2e_prompts, config.random_shapes, config.max_captured,
                   config.input_dtype, config.extra_calls, config.extra_s)


def random_stage_shapes(candidate: ev.Candidate, settings: CascadeSettings) -> list[Shape]:
    """Odd and oversized shapes, the campaign's own traffic shapes, and that traffic's extremes (its
    largest batch at its longest context, its longest prefill): where a shortcut would break."""
    traffic = [Shape("prefill" if b.phase == ev.PHASE_PREFILL else "decode", max(b.batch_size, 1),
                     max(b.context_len, 1)) for b in candidate.shapes]
    shapes = list(settings.random_shapes) + traffic
    decode = [s for s in traffic if s.phase == "decode"]
    prefill = [s for s in traffic if s.phase == "prefill"]
    if decode:
        shapes.append(Shape("decode", max(s.batch for s in decode), max(s.context for s in decode)))
    if prefill:
        shapes.append(Shape("prefill", 1, max(s.context for s in prefill)))
    return list(dict.fromkeys(shapes))


@dataclass
class Outcome:
    checks: list[ev.CheckResult] = field(default_factory=list)

    def add(self, check: ev.CheckResult) -> bool:
        self.checks.append(check)
        return check.passed

    @property
    def failure(self) -> ev.CheckResult | None:
        return next((c for c in self.checks if not c.passed), None)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and self.failure is None

    @property
    def reason(self) -> str:
        if self.failure is not None:
            return f"{self.failure.stage}: {self.failure.detail}"
        return "passed " + ", ".join(c.stage for c in self.checks)


def static_stage(candidate: ev.Candidate, input_dtype: str) -> ev.CheckResult:
    report = check_source(candidate.source, candidate.slot, _BACKENDS.get(candidate.backend, ""), input_dtype)
    return ev.CheckResult(stage="static", passed=report.passed, detail=report.detail())


async def run_cascade(candidate: ev.Candidate, engine: EngineClient | None, settings: CascadeSettings,
                      seed: int) -> Outcome:
    """Verify one candidate. `engine` may be None only when the static stage is expected to fail."""
    outcome = Outcome()
    if not outcome.add(static_stage(candidate, settings.input_dtype)):
        return outcome
    if engine is None:
        raise EngineUnavailable("no engine to run the dynamic stages")
    return await run_dynamic_stages(candidate, engine, settings, seed, outcome)


async def run_dynamic_stages(candidate: ev.Candidate, engine: EngineClient, settings: CascadeSettings,
                             seed: int, outcome: Outcome | None = None) -> Outcome:
    """load -> captured -> random -> race -> end_to_end. Alone (without static) only in defence-in-depth
    tests: what would the engine stages catch if the static checks missed something?"""
    outcome = outcome if outcome is not None else Outcome()
    try:
        await _dynamic_stages(outcome, candidate, engine, settings, seed)
    except EngineProtocolError as exc:
        raise EngineUnavailable(str(exc)) from exc
    return outcome


async def _dynamic_stages(outcome: Outcome, candidate: ev.Candidate, engine: EngineClient,
                          settings: CascadeSettings, seed: int) -> None:
    captured = await engine.run_slot(es.RunSlotRequest(
        candidate=candidate, tier=es.TIER_SLOW, source=es.INPUT_SOURCE_CAPTURED, seed=seed,
        max_inputs=settings.max_captured,
    ))
    if not outcome.add(load_check(captured)):
        return
    if not await _judge(outcome, "captured", captured):
        return
    shapes = random_stage_shapes(candidate, settings)
    random_reply = await engine.run_slot(es.RunSlotRequest(
        candidate=candidate, tier=es.TIER_SLOW, source=es.INPUT_SOURCE_RANDOM, seed=seed,
        shapes=[ev.ShapeBucket(phase=_PHASES[s.phase], batch_size=s.batch, context_len=s.context, weight=1.0)
                for s in shapes], repeats=settings.extra_calls, repeats_s=settings.extra_s,
    ))
    note = f"seed {seed}, shapes {' '.join(str(s) for s in shapes)}: "
    if not await _judge(outcome, "random", random_reply, note=note):
        return
    extra = check_extra_calls("random", random_reply, settings.extra_calls)
    if extra is not None:
        extra.detail = note + extra.detail
        outcome.add(extra)
        return
    cut = " (the time limit cut them short: a slow kernel)" if random_reply.extra_stopped_by_time else ""
    outcome.checks[-1].detail += f"; {random_reply.extra_calls} further calls on fresh inputs passed{cut}"
    runs = [*captured.runs, *random_reply.runs]
    if not outcome.add(await asyncio.to_thread(check_outputs, "race", runs, "second")):
        return
    dtype = reference_dtype(runs)
    outcome.add(await check_end_to_end(engine, candidate, steps=settings.e2e_steps,
                                       prompts=prompts_for(seed, settings.e2e_prompts), dtype=dtype))


async def _judge(outcome: Outcome, stage: str, reply: es.RunSlotReply, note: str = "") -> bool:
    reason = status_failure(reply.status, reply.error)
    if reason:
        return outcome.add(failed(stage, note + reason))
    # Decoding and comparing big captured tensors is CPU work: keep the event loop (acks) responsive.
    check = await asyncio.to_thread(check_outputs, stage, reply.runs)
    check.detail = note + check.detail
    return outcome.add(check)


def build_verdict(candidate: ev.Candidate, bench: ev.BenchmarkResult, outcome: Outcome, *, verify_s: float,
                  finished_unix: float) -> ev.Verdict:
    failure = outcome.failure
    return ev.Verdict(
        candidate_id=candidate.candidate_id,
        campaign_id=bench.campaign_id or candidate.campaign_id,
        slot=candidate.slot,
        status=ev.VERDICT_STATUS_PASSED if outcome.passed else ev.VERDICT_STATUS_FAILED,
        failed_stage=failure.stage if failure is not None else "",
        reason=outcome.reason,
        checks=outcome.checks,
        speedup=bench.speedup,
        speedup_lo=bench.speedup_lo,
        speedup_vs_reference=bench.speedup_vs_reference,
        hardware=bench.hardware,
        model=bench.model or candidate.model,
        verify_s=verify_s,
        finished_unix=finished_unix,
    )
