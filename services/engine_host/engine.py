"""The engine: the ONE code path behind the gRPC API and the host's own queue consumer.

It owns one harness per tier (fast: a few layers, slow: the whole model), turns requests into typed
harness commands (protocol.py) and their reports into protobuf replies. Slots and regions are both
ops: the same benchmark, swap, run and generate paths serve either. Candidate failures are results (a
status and a reason), never exceptions; `EngineRequestError` means the request itself is invalid.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import metrics
from services.common.log import get_logger
from services.common.shapes import Shape, ShapeError
from services.common.slot_specs import OPS, REGIONS, SLOTS, candidate_id
from services.engine_host import protos
from services.engine_host.config import EngineHostConfig
from services.engine_host.procs import ChildFailure, ChildRefused
from services.engine_host.protocol import (
    Benchmark,
    BenchmarkReport,
    GenerateReport,
    HarnessSpec,
    InputSource,
    Install,
    Profile,
    ProfileReport,
    Rollback,
    RunOp,
    RunReport,
    Status,
    SwapReport,
)
from services.engine_host.protocol import Generate as GenerateCmd
from services.engine_host.tiers import Tier, code_of

log = get_logger("engine_host.engine")

REFERENCE_ID = "reference"


class EngineRequestError(ValueError):
    """The request cannot be served as asked (unknown op or tier, bad prompt, ...)."""


def _with_id(candidate: ev.Candidate) -> ev.Candidate:
    if candidate.candidate_id:
        return candidate
    filled = ev.Candidate()
    filled.CopyFrom(candidate)
    filled.candidate_id = candidate_id(candidate.slot, candidate.source)
    return filled


def _known(op: str, what: str = "op") -> None:
    if op not in OPS:
        raise EngineRequestError(f"unknown {what} {op!r}; slots: {', '.join(SLOTS)}; regions: {', '.join(REGIONS)}")


class Engine:
    def __init__(self, config: EngineHostConfig, model: str, data_dir: Path) -> None:
        self.config, self.model, self.data_dir = config, model, data_dir
        base = HarnessSpec(
            tier="fast", model=model, n_layers=config.fast_layers, seed=config.seed, device=config.device,
            data_dir=str(data_dir), max_batch=config.max_batch, max_tokens=config.max_tokens, max_seq=config.max_seq,
            max_shapes=config.max_shapes, threads=config.threads, rounds=config.rounds, samples=config.samples,
            target_sample_s=config.sample_s, noise_floor=config.noise_floor,
            capture_per_slot=config.capture_per_slot, checkpoint=config.checkpoint,
            candidate_timeout_s=config.candidate_timeout_s, sandbox_pool=config.sandbox_pool,
            sandbox_relax=config.sandbox_relax, jit_timeout_s=config.jit_timeout_s,
        )
        specs = {
            "fast": base,
            # the slow tier is where real inputs come from: capture them at the default shapes up front
            "slow": replace(base, tier="slow", n_layers=None, capture_shapes=config.default_shapes),
        }
        self.tiers = {name: Tier(name, specs[name], config.start_timeout_s) for name in config.tiers}
        self.svr: dict[str, float] = {REFERENCE_ID: 1.0}  # candidate id → speedup vs reference
        self.known: dict[str, ev.Candidate] = {}  # every candidate installed on this host, by id
        self.experiments = 0
        self.started = time.monotonic()

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.gather(*(t.start() for t in self.tiers.values()))

    async def stop(self) -> None:
        await asyncio.gather(*(t.stop() for t in self.tiers.values()), return_exceptions=True)

    def _info(self, field: str) -> str:
        info = next(iter(self.tiers.values())).info
        return str(getattr(info, field)) if info is not None else ""

    @property
    def hardware(self) -> str:
        return self._info("hardware")

    @property
    def device(self) -> str:
        return self._info("device")

    @property
    def engine_id(self) -> str:
        return self.config.engine_id

    def tier(self, value: int, default: str) -> Tier:
        name = protos.TIER_NAMES.get(value, default) if value else default
        if name not in self.tiers:
            if value:
                raise EngineRequestError(f"this host runs no {name} tier (tiers: {', '.join(self.tiers)})")
            name = next(iter(self.tiers))
        return self.tiers[name]

    def _targets(self, value: int) -> list[Tier]:
        return list(self.tiers.values()) if not value else [self.tier(value, "fast")]

    def _shapes(self, *lists: Any) -> tuple[Shape, ...]:
        try:
            for buckets in lists:
                if buckets:
                    return protos.shapes(buckets)
        except ShapeError as exc:
            raise EngineRequestError(str(exc)) from exc
        return tuple(self.config.default_shapes)

    def _timeout(self) -> float:
        # the harness enforces the per-candidate limit on its sandboxes; this one guards the harness
        return max(self.config.candidate_timeout_s * 4, 300.0)

    async def _call(self, tier: Tier, command: Any) -> Any:
        try:
            return await tier.call(command, self._timeout())
        except ChildRefused as exc:
            raise EngineRequestError(str(exc)) from exc

    # -- benchmark --------------------------------------------------------------------------
    async def benchmark(self, candidate: ev.Candidate, shapes: list[ev.ShapeBucket] | None = None,
                        tier: int = es.TIER_UNSPECIFIED, rounds: int = 0) -> ev.BenchmarkResult:
        began = time.perf_counter()
        target = self.tier(tier, "fast")
        candidate = _with_id(candidate)
        result = ev.BenchmarkResult(
            candidate_id=candidate.candidate_id, campaign_id=candidate.campaign_id, slot=candidate.slot,
            engine_id=self.engine_id, tier=target.name, hardware=self.hardware, model=self.model,
        )
        if candidate.slot not in OPS:
            result.status = ev.BENCH_STATUS_LOAD_ERROR
            result.reason = f"unknown slot or region {candidate.slot!r}"
            result.incumbent_id = REFERENCE_ID
        else:
            result.incumbent_id = target.op_ids().get(candidate.slot, REFERENCE_ID)
            command = Benchmark(code_of(candidate), self._shapes(shapes, candidate.shapes), rounds)
            try:
                report: BenchmarkReport = await self._call(target, command)
            except ChildFailure as failure:
                result.status = protos.BENCH_STATUS[failure.status]
                result.reason = f"{failure.reason}; harness restarted"
            else:
                self._fill(result, report)
        self.experiments += 1
        result.bench_s = time.perf_counter() - began
        result.finished_unix = time.time()
        metrics.ENGINE_BENCHMARKS.labels(target.name, metrics.enum_label(ev.BenchStatus, result.status)).inc()
        log.info("benchmarked", candidate_id=result.candidate_id, slot=result.slot, tier=target.name,
                 status=ev.BenchStatus.Name(result.status), speedup=round(result.speedup, 4),
                 speedup_lo=round(result.speedup_lo, 4), reason=result.reason, bench_s=round(result.bench_s, 2))
        return result

    def _fill(self, result: ev.BenchmarkResult, report: BenchmarkReport) -> None:
        result.status = protos.BENCH_STATUS[report.status]
        result.reason = report.reason
        result.incumbent_id = report.incumbent_id or result.incumbent_id
        if report.status != Status.OK or report.candidate is None or report.incumbent is None:
            return
        result.candidate.CopyFrom(protos.timing(report.candidate))
        result.incumbent.CopyFrom(protos.timing(report.incumbent))
        result.aa_spread = report.aa_spread
        result.speedup, result.speedup_lo, result.speedup_hi = report.speedup, report.speedup_lo, report.speedup_hi
        result.checked_calls, result.timed_calls = report.checked_calls, report.timed_calls
        # 0 when the incumbent's own gain is unknown (installed by hand rather than promoted)
        result.speedup_vs_reference = result.speedup * self.svr.get(result.incumbent_id, 0.0)

    # -- hot swap: only kernels that passed reach the live engines ------------------------------
    async def swap(self, candidate: ev.Candidate, tier: int = es.TIER_UNSPECIFIED) -> es.SwapKernelReply:
        candidate = _with_id(candidate)
        _known(candidate.slot, "slot or region")
        reply = es.SwapKernelReply(ok=True, slot=candidate.slot, status=es.RUN_STATUS_OK)
        for target in self._targets(tier):
            try:
                out: SwapReport = await self._call(target, Install(code_of(candidate), warm=False))
            except ChildFailure as failure:
                self._fail(reply, protos.RUN_STATUS[failure.status], f"{target.name}: {failure.reason}")
                continue
            reply.previous_id = reply.previous_id or out.previous_id
            if out.status != Status.OK:
                self._fail(reply, protos.RUN_STATUS[out.status], f"{target.name}: {out.error}")
                continue
            target.installed.pop(candidate.slot, None)  # re-insert: restarts re-install in swap order
            target.installed[candidate.slot] = candidate
            self.known[candidate.candidate_id] = candidate
            reply.installed_id = candidate.candidate_id
            reply.swap_s = max(reply.swap_s, out.swap_s)
        return reply

    @staticmethod
    def _fail(reply: es.SwapKernelReply, status: es.RunStatus, error: str) -> None:
        reply.ok = False
        if reply.status == es.RUN_STATUS_OK:
            reply.status = status
        reply.error = f"{reply.error}; {error}" if reply.error else error

    async def rollback(self, slot: str, tier: int = es.TIER_UNSPECIFIED,
                       to_candidate_id: str = "") -> es.SwapKernelReply:
        _known(slot, "slot or region")
        if to_candidate_id and to_candidate_id != REFERENCE_ID:
            if to_candidate_id not in self.known:
                raise EngineRequestError(f"candidate {to_candidate_id} was never installed on this host")
            return await self.swap(self.known[to_candidate_id], tier)
        reply = es.SwapKernelReply(ok=True, slot=slot, status=es.RUN_STATUS_OK, installed_id=REFERENCE_ID)
        for target in self._targets(tier):
            began = time.perf_counter()
            target.installed.pop(slot, None)  # first: a harness restarted meanwhile comes back without it
            try:
                out: SwapReport = await self._call(target, Rollback(slot))
            except ChildFailure as failure:
                self._fail(reply, protos.RUN_STATUS[failure.status], f"{target.name}: {failure.reason}")
                continue
            reply.previous_id = reply.previous_id or out.previous_id
            reply.swap_s = max(reply.swap_s, time.perf_counter() - began)
        return reply

    async def set_incumbent(self, slot: str, candidate: ev.Candidate | None, speedup_vs_reference: float) -> bool:
        """Install a promoted kernel (or the reference when None) on every tier."""
        if candidate is None:
            return (await self.rollback(slot)).ok
        self.svr[candidate.candidate_id] = speedup_vs_reference
        reply = await self.swap(candidate)
        if not reply.ok:
            log.error("promoted kernel did not install", candidate_id=candidate.candidate_id, error=reply.error)
        return reply.ok

    # -- run, profile, generate -------------------------------------------------------------
    async def run_slot(self, req: es.RunSlotRequest) -> es.RunSlotReply:
        op = req.candidate.slot
        if not op:
            raise EngineRequestError("set candidate.slot (a slot or a region)")
        _known(op, "slot or region")
        target = self.tier(req.tier, "slow")
        source = InputSource.RANDOM if req.source == es.INPUT_SOURCE_RANDOM else InputSource.CAPTURED
        shapes = self._shapes(req.shapes) if req.shapes else ()
        if source == InputSource.RANDOM and not shapes:
            shapes = tuple(self.config.default_shapes)
        code = code_of(_with_id(req.candidate)) if req.candidate.source.strip() else None
        command = RunOp(op, code, source, shapes, req.seed, req.max_inputs, max(req.repeats, 0),
                        max(req.repeats_s, 0.0))
        try:
            out: RunReport = await self._call(target, command)
        except ChildFailure as failure:
            return es.RunSlotReply(slot=op, status=protos.RUN_STATUS[failure.status],
                                   error=f"{failure.reason}; harness restarted")
        return protos.run_slot_reply(op, out)

    async def profile(self, req: es.ProfileRequest) -> es.ProfileReply:
        target = self.tier(req.tier, "slow")
        try:
            out: ProfileReport = await self._call(target, Profile(self._shapes(req.shapes)))
        except ChildFailure as failure:
            raise EngineRequestError(f"profile failed: {failure.reason}") from failure
        reply = es.ProfileReply(step_us=out.step_us, copy_bandwidth_gb_s=out.copy_bandwidth_gb_s)
        for t in out.times:
            reply.times.append(es.SlotTime(slot=t.op, shape=protos.bucket(t.shape), median_us=t.median_us,
                                           calls_per_step=t.calls_per_step, floor_us=t.floor_us))
        for st in out.shape_steps:
            reply.steps.append(es.ShapeStep(shape=protos.bucket(st.shape), step_us=st.step_us,
                                            tokens_per_s=st.tokens_per_s))
        return reply

    async def generate(self, req: es.GenerateRequest) -> es.GenerateReply:
        target = self.tier(req.tier, "slow")
        overrides = [_with_id(c) for c in req.overrides]
        for c in overrides:
            if c.slot not in OPS:
                raise EngineRequestError(f"override {c.candidate_id}: unknown slot or region {c.slot!r}")
        command = GenerateCmd(tuple(req.prompt), req.steps, tuple(code_of(c) for c in overrides),
                              req.reference_only, req.return_logits)
        try:
            out: GenerateReport = await self._call(target, command)
        except ChildFailure as failure:
            return es.GenerateReply(status=protos.RUN_STATUS[failure.status],
                                    error=f"{failure.reason}; harness restarted")
        reply = es.GenerateReply(status=protos.RUN_STATUS[out.status], error=out.error, tokens=list(out.tokens),
                                 seconds=out.seconds)
        if out.logits is not None:
            reply.logits.CopyFrom(protos.tensor(out.logits))
        return reply

    # -- status -----------------------------------------------------------------------------
    def status(self) -> es.StatusReply:
        reply = es.StatusReply(engine_id=self.engine_id, model=self.model, hardware=self.hardware,
                               device=self.device, experiments=self.experiments,
                               uptime_s=time.monotonic() - self.started)
        for name, tier in self.tiers.items():
            slots = [es.SlotState(slot=op, candidate_id=cid, signature=_signature(op))
                     for op, cid in tier.op_ids().items()]
            info = tier.info
            reply.tiers.append(es.TierStatus(
                tier=protos.TIER_ENUMS[name], layers=info.layers if info else 0, slots=slots,
                worker_restarts=tier.restarts, worker_alive=tier.alive, worker_start_s=tier.start_s,
                containment=info.containment if info else {}))
        return reply


def _signature(op: str) -> str:
    if op in SLOTS:
        return f"kernel({', '.join(SLOTS[op].params)}): {SLOTS[op].doc}"
    return f"kernel({', '.join(OPS[op].params)}): the {op} region's forward"
