"""The Harness object behind harness.py's process loop (imported after the process is set up)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing

from services.common.hardware import hardware_name
from services.common.log import get_logger
from services.common.shapes import Shape
from services.common.tensors import encode
from services.engine_host import capture as cap
from services.engine_host import harness_bench
from services.engine_host.cuda_graphs import DecodeGraphs
from services.engine_host.cuda_graphs import generate as graph_generate
from services.engine_host.inputs import resolve
from services.engine_host.models.llama import build_model, generate, model_args
from services.engine_host.ops import OpTable, check_op
from services.engine_host.procs import ChildFailure
from services.engine_host.protocol import (
    AttachModel,
    Benchmark,
    CandidateCode,
    Capture,
    CaptureReport,
    DecodeRate,
    Generate,
    GenerateReport,
    HarnessInfo,
    HarnessSpec,
    Info,
    Install,
    Load,
    ModelShare,
    Profile,
    RateReport,
    Rollback,
    RunOp,
    Status,
    Steps,
    SwapReport,
)
from services.engine_host.safetensors_loader import load_into
from services.engine_host.sandboxes import Sandbox, SandboxPool, SandboxSettings
from services.engine_host.timing import Settings


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


log = get_logger("engine_host.harness")


class Harness:
    def __init__(self, spec: HarnessSpec, progress: Callable[[str], None]) -> None:
        # tensors sent to sandboxes travel shared; CPU ones by shared-memory name, not through a socket
        # the sandbox would connect to (it cannot: its mount namespace hides our multiprocessing sockets)
        torch.multiprocessing.set_sharing_strategy("file_system")
        self.spec, self.progress = spec, progress
        self.start_stages: dict[str, float] = {}
        self._stage_began = time.perf_counter()
        self.device = resolve_device(spec.device)
        self.args = model_args(spec.model, spec.n_layers)
        self.table = OpTable()  # references only, forever: this process never loads a candidate
        self.model = build_model(self.args, self.table, seed=spec.seed, device=str(self.device),
                                 max_batch=spec.max_batch, max_seq=spec.max_seq or None, init=not spec.checkpoint)
        if spec.checkpoint:  # real weights: every parameter this tier holds must come from the file
            progress(f"loading {spec.checkpoint}")
            load_into(self.model, spec.checkpoint)
        self._stage_done("weights_s")
        self.view = cap.ModelView(self.model, self.table, None, self.device, spec.seed, progress)
        self.captured = cap.CaptureStore(spec.capture_per_slot)
        if spec.capture_shapes:
            self.capture(Capture(spec.capture_shapes))
        self._stage_done("captured_inputs_s")
        self.timing = Settings(rounds=spec.rounds, samples=spec.samples, target_sample_s=spec.target_sample_s,
                               noise_floor=spec.noise_floor)
        # reference generation on a GPU runs through graphs too (its own, of reference ops only)
        self.ref_graphs = (DecodeGraphs(self.model, self.table, [1])
                           if self.device.type == "cuda" and spec.graphs else None)
        root = Path(spec.data_dir).resolve() / "sandboxes" / spec.tier  # absolute: a sandbox confines itself elsewhere
        self.pool = SandboxPool(SandboxSettings(str(self.device), spec.threads, str(root),
                                                spec.sandbox_start_timeout_s, spec.sandbox_pool, spec.sandbox_relax,
                                                spec.jit_timeout_s))
        self.pool.fill()
        self.box_weights: dict[str, torch.Tensor] | None = None  # the copy candidate sandboxes share
        self.live_weights = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.installed: dict[str, CandidateCode] = {}  # op → the passed kernel the live engine holds
        self.live_restarts = 0
        self.live = self._start_live()
        self._stage_done("sandboxes_s")
        for bucket in spec.warm_buckets:
            self.live.call(Steps(bucket, 1), self.live_timeout)
        self._stage_done("graphs_s")
        self.dying: list[Sandbox] = []  # closed without waiting: `quiet()` waits for them
        self.recent: tuple[str, Sandbox] | None = None  # the last candidate's sandbox, for its next RunOp
        self.recent_e2e: tuple[tuple[str, ...], Sandbox] | None = None  # the last end-to-end combination

    def _stage_done(self, name: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.start_stages[name] = now - self._stage_began
        self._stage_began = now

    @property
    def live_timeout(self) -> float:
        return max(self.spec.candidate_timeout_s, 120.0)

    # -- sandboxes ----------------------------------------------------------------------------
    def attach(self, box: Sandbox, weights: dict[str, torch.Tensor], max_batch: int, graphs: bool) -> None:
        """Give a sandbox a model: `weights` shared, KV caches the harness allocates and owns."""
        a = self.args
        shape = (max_batch, a.n_kv_heads, self.model.max_seq, a.head_dim)
        caches = tuple((torch.zeros(shape, dtype=a.torch_dtype, device=self.device),
                        torch.zeros(shape, dtype=a.torch_dtype, device=self.device)) for _ in range(a.n_layers))
        box.call(AttachModel(ModelShare(a, weights, caches, max_batch, graphs)), self.live_timeout)
        box.caches = caches
        box.model_attached = True

    def sandbox_weights(self) -> dict[str, torch.Tensor]:
        if self.box_weights is None:
            self.box_weights = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        return self.box_weights

    def weights_intact(self) -> bool:
        """The candidates' copy still equals the harness's weights bit for bit (restored if not)."""
        if self.box_weights is None:
            return True
        intact = True
        for name, p in self.model.named_parameters():
            copy = self.box_weights[name]
            if not torch.equal(copy.view(torch.uint8) if copy.dtype == torch.bool else copy, p):
                copy.copy_(p)
                intact = False
        return intact

    def release(self, box: Sandbox) -> str:
        """Close a candidate's sandbox; '' or why its run must fail (it wrote into the shared weights)."""
        attached = box.model_attached
        # without the model nothing of it is read after its death, so it dies in the background (a CUDA
        # context takes ~0.1 s to tear down) while the next candidate loads; `quiet()` waits for it
        # before anything is timed, and its blocks stay allocated until it has exited (ipc_refs)
        if attached:
            box.close()
        else:
            self.close_later(box)
        if self.recent is not None and self.recent[1] is box:
            self.recent = None
        if self.recent_e2e is not None and self.recent_e2e[1] is box:
            self.recent_e2e = None
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()
        self.pool.fill()
        if attached and not self.weights_intact():
            return "the kernel wrote into the model's weights (restored)"
        return ""

    def close_later(self, box: Sandbox) -> None:
        box.close(wait=False)
        self.dying.append(box)

    def quiet(self) -> None:
        """Before anything is timed: every sandbox closed in the background has exited (its teardown
        would take CPU and the driver from the sides being timed)."""
        for box in self.dying:
            if not box.wait_closed(30.0):
                log.warning("a closed sandbox has not exited after 30 s", label=box.label)
        self.dying = []

    def candidate_box(self, cand: CandidateCode, with_model: bool, max_batch: int) -> tuple[Sandbox, SwapReport]:
        """A sandbox holding `cand` only: the last candidate's again when it is the same one."""
        if self.recent is not None and self.recent[0] == cand.candidate_id and self.recent[1].alive \
                and (self.recent[1].model_attached or not with_model):
            return self.recent[1], SwapReport(Status.OK, installed_id=cand.candidate_id)
        if self.recent is not None:
            self.release(self.recent[1])
        box = self.pool.take()
        if with_model:
            self.attach(box, self.sandbox_weights(), max_batch, graphs=False)
        report: SwapReport = box.call(Load((cand,)), self.spec.candidate_timeout_s)
        box.jit_pending = report.backend in ("triton", "compile")
        self.recent = (cand.candidate_id, box)
        return box, report

    def incumbent_box(self, op: str, with_model: bool, max_batch: int) -> Sandbox:
        """A fresh pooled sandbox holding what the live engine serves for `op` (its promoted kernel, or
        the reference): the incumbent is timed in a process with the same history as the candidate's.
        The long-lived live engine is not exchangeable with a fresh sandbox: under CPU contention the
        scheduler treated it differently, and an A/A pair came out 1.46x "faster" beyond the interval."""
        box = self.pool.take("incumbent")
        if with_model:  # the live engine's weights, which no candidate's sandbox ever sees
            self.attach(box, self.live_weights, max_batch, graphs=False)
        if op in self.installed:
            report: SwapReport = box.call(Load((self.installed[op],)), self.live_timeout)
            if report.status != Status.OK:
                box.close()
                raise RuntimeError(f"the installed {op} kernel no longer loads: {report.error}")
            box.jit_pending = report.backend in ("triton", "compile")
        return box

    def _start_live(self) -> Sandbox:
        box = self.pool.spawn("live")
        self.attach(box, self.live_weights, self.model.max_batch, self.spec.graphs)
        for op, cand in list(self.installed.items()):
            report = box.call(Load((cand,)), self.live_timeout)
            if report.status != Status.OK:  # it loaded before: drop it rather than fail every restart
                self.installed.pop(op)
        return box

    def restart_live(self) -> None:
        self.live.close()
        self.live_restarts += 1
        self.live = self._start_live()

    def live_call(self, command: Any) -> Any:
        try:
            return self.live.call(command, self.live_timeout)
        except ChildFailure:
            self.restart_live()
            raise

    # -- dispatch -----------------------------------------------------------------------------
    def handle(self, command: Any) -> Any:
        handlers: dict[type, Callable[[Any], Any]] = {
            Benchmark: lambda c: harness_bench.benchmark(self, c), RunOp: lambda c: harness_bench.run_op(self, c),
            Install: self.install, Rollback: self.rollback, Generate: self.generate, Profile: self.profile,
            Capture: self.capture, DecodeRate: self.decode_rate, Info: lambda _: self.info(),
        }
        handler = handlers.get(type(command))
        if handler is None:
            raise TypeError(f"a harness does not take {type(command).__name__}")
        return handler(command)

    def info(self) -> HarnessInfo:
        ops = dict.fromkeys(self.table.ids(), "reference")
        ops.update({op: c.candidate_id for op, c in self.installed.items()})
        return HarnessInfo(
            tier=self.spec.tier, device=str(self.device), hardware=hardware_name(self.device),
            layers=self.args.n_layers, ops=ops, vocab_size=self.args.vocab_size, max_seq=self.model.max_seq,
            dtype=self.args.dtype, torch=torch.__version__, graphs=self.spec.graphs and self.device.type == "cuda",
            captured=self.captured.counts(), weights=self.spec.checkpoint or f"random (seed {self.spec.seed})",
            start_stages={k: round(v, 3) for k, v in self.start_stages.items()}, containment=self.live.measures,
        )

    def shapes(self, raw: tuple[Shape, ...], heaviest: int = 0) -> list[Shape]:
        """Clamp each bucket to this model, box and KV cache; merge equal ones; heaviest first."""
        merged: dict[str, Shape] = {}
        for requested in raw:
            s = resolve(requested, self.args, max_batch=self.model.max_batch, max_tokens=self.spec.max_tokens)
            s = replace(s, context=min(s.context, self.model.max_seq - 4))
            if s.key in merged:
                s = replace(s, weight=s.weight + merged[s.key].weight)
            merged[s.key] = s
        if not merged:
            raise ValueError("no shapes to run at")
        ordered = sorted(merged.values(), key=lambda s: -s.weight)
        return ordered[:heaviest] if heaviest > 0 else ordered

    # -- the live engine ----------------------------------------------------------------------
    def install(self, cmd: Install) -> SwapReport:
        check_op(cmd.candidate.op)
        began = time.perf_counter()
        try:
            report: SwapReport = self.live_call(cmd)
            if report.status == Status.OK and cmd.warm:
                loaded = time.perf_counter()
                self.live_call(Steps(1, 1))  # its JIT and the bucket's re-capture, reported apart
                report = replace(report, jit_s=time.perf_counter() - loaded)
        except ChildFailure as failure:
            return SwapReport(failure.status, f"live engine: {failure.reason}; restarted without it")
        if report.status == Status.OK:
            self.installed.pop(cmd.candidate.op, None)  # re-insert: restarts re-load in install order
            self.installed[cmd.candidate.op] = cmd.candidate
        return replace(report, swap_s=time.perf_counter() - began)

    def rollback(self, cmd: Rollback) -> SwapReport:
        check_op(cmd.op)
        self.installed.pop(cmd.op, None)  # first: a live engine restarted meanwhile comes back without it
        try:
            return self.live_call(cmd)
        except ChildFailure as failure:
            return SwapReport(failure.status, f"live engine: {failure.reason}; restarted")

    def profile(self, cmd: Profile) -> Any:
        return self.live_call(Profile(tuple(self.shapes(cmd.shapes))))

    def capture(self, cmd: Capture) -> CaptureReport:
        done = cap.capture(self.view, self.captured, self.shapes(cmd.shapes), only_missing=False)
        return CaptureReport(tuple(done), self.captured.counts())

    def decode_rate(self, cmd: DecodeRate) -> RateReport:
        """Decode tokens/s of the live engine, timed here around its Steps round trips."""
        if not 1 <= cmd.batch <= self.model.max_batch or cmd.steps < 1:
            raise ValueError(f"batch must lie in [1, {self.model.max_batch}] and steps >= 1")
        self.quiet()
        began = time.perf_counter()
        first = self.live_call(Steps(cmd.batch, 1))
        first_s = time.perf_counter() - began
        rates = []
        for _ in range(cmd.blocks):
            t0 = time.perf_counter()
            self.live_call(Steps(cmd.batch, cmd.steps))
            rates.append(cmd.batch * cmd.steps / (time.perf_counter() - t0))
        return RateReport(float(sorted(rates)[len(rates) // 2]), tuple(rates), first_s, first["recaptured"],
                          first["graphs"], first["capture"])

    # -- generation ---------------------------------------------------------------------------
    def generate(self, cmd: Generate) -> GenerateReport:
        prompt, steps = list(cmd.prompt), cmd.steps
        if not prompt or steps <= 0:
            raise ValueError("generate needs a non-empty prompt and steps > 0")
        if min(prompt) < 0 or max(prompt) >= self.args.vocab_size:
            raise ValueError(f"prompt tokens must lie in [0, {self.args.vocab_size})")
        if len(prompt) + steps > self.model.max_seq:
            raise ValueError(f"prompt {len(prompt)} + steps {steps} exceeds max_seq {self.model.max_seq}")
        if cmd.reference_only:
            return self._reference_generate(cmd)
        if not cmd.overrides:
            try:
                return self.live_call(cmd)
            except ChildFailure as failure:
                return GenerateReport(failure.status, f"live engine: {failure.reason}; restarted")
        return self._sandbox_generate(cmd)

    def _reference_generate(self, cmd: Generate) -> GenerateReport:
        start = time.perf_counter()
        idx = torch.tensor([list(cmd.prompt)], dtype=torch.long, device=self.device)
        if self.ref_graphs is not None:
            tokens, logits = graph_generate(self.ref_graphs, idx, cmd.steps, keep_logits=cmd.return_logits)
        else:
            tokens, logits = generate(self.model, idx, cmd.steps)
        encoded = encode(logits[0].float()) if cmd.return_logits and logits is not None else None
        return GenerateReport(Status.OK, tokens=tuple(tokens[0].tolist()), logits=encoded,
                              seconds=time.perf_counter() - start)

    def _sandbox_generate(self, cmd: Generate) -> GenerateReport:
        """Unverified overrides over the passed incumbents, in a sandbox with the whole model that serves
        this one combination only (the verifier's next prompt for the same candidate reuses it)."""
        for c in cmd.overrides:
            check_op(c.op)
        replaced = {c.op for c in cmd.overrides}
        incumbents = tuple(c for op, c in self.installed.items() if op not in replaced)
        key = tuple(c.candidate_id for c in (*incumbents, *cmd.overrides))
        if self.recent_e2e is not None and (self.recent_e2e[0] != key or not self.recent_e2e[1].alive):
            why = self.release(self.recent_e2e[1])
            if why:
                return GenerateReport(Status.WRONG_OUTPUT, why)
        try:
            if self.recent_e2e is None:
                box = self.pool.take("e2e")
                self.recent_e2e = (key, box)
                self.attach(box, self.sandbox_weights(), 1, self.spec.graphs)
                for group in (incumbents, cmd.overrides):
                    if group:
                        loaded: SwapReport = box.call(Load(group), self.spec.candidate_timeout_s)
                        if loaded.status != Status.OK:
                            self.release(box)
                            return GenerateReport(loaded.status, f"override {loaded.error}")
            box = self.recent_e2e[1]
            # generation calls every kernel, the first time compiling it: the JIT allowance
            report: GenerateReport = box.call(replace(cmd, overrides=()), max(self.spec.candidate_timeout_s,
                                                                                 self.spec.jit_timeout_s))
        except ChildFailure as failure:
            if self.recent_e2e is not None:
                self.release(self.recent_e2e[1])
            return GenerateReport(failure.status, failure.reason)
        if not self.weights_intact():
            self.release(box)
            return GenerateReport(Status.WRONG_OUTPUT, "the kernel wrote into the model's weights (restored)")
        return report

    def close(self) -> None:
        for recent in (self.recent, self.recent_e2e):
            if recent is not None:
                recent[1].close()
        self.live.close()
        self.pool.close()
        self.quiet()
