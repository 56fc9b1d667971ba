"""What an engine worker holds: the model (weights loaded once), its slot table, captured inputs.

Runs only inside the worker process (see worker.py). Every method returns plain data (dicts, lists,
encoded tensors) so the pipe never pickles torch objects. Candidate outcomes come back as a status
("OK", "LOAD_ERROR", "RAISED", "WRONG_OUTPUT"); anything else raised is a bad request.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from services.common.slot_specs import REGIONS
from services.engine_host import capture, regionbench, slotbench
from services.engine_host.cuda_graphs import DecodeGraphs, buckets_for
from services.engine_host.cuda_graphs import generate as graph_generate
from services.engine_host.gpu_regions import RegionTable
from services.engine_host.inputs import Shape, resolve
from services.engine_host.loader import LoadedCandidate, LoadError, error_line, load_candidate
from services.engine_host.models.llama import build_model, generate, model_args
from services.engine_host.outputs import encode
from services.engine_host.safetensors_loader import load_into
from services.engine_host.slots import SlotTable
from services.engine_host.timing import CpuTimer, CudaTimer, Settings, Timer
from services.engine_host.worker import RawShape, WorkerSpec


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def hardware_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class Runtime:
    def __init__(self, spec: WorkerSpec, progress: Callable[[str], None]) -> None:
        self.spec, self.progress = spec, progress
        self.start_stages: dict[str, float] = {}  # seconds of each start stage, for cold-start reports
        self._stage_began = time.perf_counter()
        self.device = resolve_device(spec.device)
        self.args = model_args(spec.model, spec.n_layers)
        self.table = SlotTable()
        self.model = build_model(self.args, self.table, seed=spec.seed, device=str(self.device),
                                 max_batch=spec.max_batch, max_seq=spec.max_seq or None,
                                 init=not spec.checkpoint)
        if spec.checkpoint:  # real weights: every parameter this tier holds must come from the file
            progress(f"loading {spec.checkpoint}")
            load_into(self.model, spec.checkpoint)
        self._stage_done("weights_s")
        self.regions = RegionTable(self.model)  # fused candidates for whole blocks (gpu_regions.py)
        self.kernels_dir = Path(spec.data_dir) / "kernels"
        self.timer: Timer = CudaTimer() if self.device.type == "cuda" else CpuTimer()
        self.settings = Settings(rounds=spec.rounds, samples=spec.samples, target_sample_s=spec.target_sample_s,
                                 noise_floor=spec.noise_floor)
        self.captured = capture.CaptureStore(spec.capture_per_slot)
        if spec.capture_shapes:
            self.capture(list(spec.capture_shapes))
        self._stage_done("captured_inputs_s")
        # decode steps replay one CUDA graph per batch bucket; a swap re-captures only the buckets
        # whose graphs call the swapped slot, lazily, when they next run (cuda_graphs.py)
        self.graphs: DecodeGraphs | None = None
        if self.device.type == "cuda" and spec.graphs:
            self.graphs = DecodeGraphs(self.model, self.table, buckets_for(self.model.max_batch),
                                       regions=self.regions)
            for bucket in spec.warm_buckets:
                self.graphs.step(torch.ones(bucket, dtype=torch.long, device=self.device), self.model.max_seq - 1)
        self._stage_done("graphs_s")

    def _stage_done(self, name: str) -> None:
        if self.device.type == "cuda":  # the stage's GPU work counts, not just its launches
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.start_stages[name] = now - self._stage_began
        self._stage_began = now

    # -- basics -----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {
            "tier": self.spec.tier, "device": str(self.device), "hardware": hardware_name(self.device),
            "layers": self.args.n_layers, "slots": self.table.ids(), "regions": dict(self.regions.installed),
            "vocab_size": self.args.vocab_size,
            "max_seq": self.model.max_seq, "dtype": self.args.dtype, "torch": torch.__version__,
            "graphs": self.graphs is not None, "captured": self.captured.counts(),
            "weights": self.spec.checkpoint or f"random (seed {self.spec.seed})",
            "start_stages": {k: round(v, 3) for k, v in self.start_stages.items()},
        }

    def shapes(self, raw: list[RawShape], heaviest: int = 0) -> list[Shape]:
        """Clamp each bucket to this model and box, merge buckets that became the same; heaviest first."""
        merged: dict[str, Shape] = {}
        for p, b, c, w in raw:
            s = resolve(p, b, c, w, self.args, max_batch=self.spec.max_batch, max_tokens=self.spec.max_tokens)
            if s.key in merged:
                s = replace(s, weight=s.weight + merged[s.key].weight)
            merged[s.key] = s
        if not merged:
            raise ValueError("no shapes to run at")
        ordered = sorted(merged.values(), key=lambda s: -s.weight)
        return ordered[:heaviest] if heaviest > 0 else ordered

    def load(self, source: str, slot: str, candidate_id: str) -> LoadedCandidate:
        return load_candidate(source, slot, self.kernels_dir, candidate_id or None)

    # -- hot swap ---------------------------------------------------------------------------
    def swap(self, source: str, slot: str, candidate_id: str, warm: bool = False) -> dict[str, Any]:
        """Install a candidate. warm: call it once at a decode shape first, so its JIT (Triton,
        torch.compile) happens here and is reported as jit_s, not inside the next graph capture."""
        start = time.perf_counter()
        try:
            cand = self.load(source, slot, candidate_id)
        except LoadError as exc:
            return {"status": "LOAD_ERROR", "error": str(exc), "previous": self.installed_id(slot)}
        loaded = time.perf_counter()
        if warm and slot not in REGIONS:  # a region's JIT happens in the warm-up step of its next capture
            shape = self.shapes([("decode", 1, min(256, self.model.max_seq - 4), 1.0)])
            _, args = slotbench.random_sets(self, slot, shape, 0)[0]
            try:
                cand.kernel(*args)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
            except Exception as exc:
                return {"status": "RAISED", "error": error_line(exc, cand.path),
                        "previous": self.table.installed_id(slot)}
        jit = time.perf_counter()
        if slot in REGIONS:
            previous = self.regions.install(slot, cand.kernel, cand.candidate_id)
        else:
            previous = self.table.swap(slot, cand.kernel, cand.candidate_id)
        return {"status": "OK", "previous": previous, "installed": cand.candidate_id,
                "swap_s": time.perf_counter() - start, "load_s": loaded - start, "jit_s": jit - loaded,
                "version": self.table.version}

    def installed_id(self, slot: str) -> str:
        return self.regions.installed[slot] if slot in REGIONS else self.table.installed_id(slot)

    def rollback(self, slot: str) -> dict[str, Any]:
        previous = self.regions.rollback(slot) if slot in REGIONS else self.table.rollback(slot)
        return {"status": "OK", "previous": previous, "installed": self.installed_id(slot),
                "version": self.table.version}

    # -- benchmark, run, profile ------------------------------------------------------------
    def benchmark(self, source: str, slot: str, candidate_id: str, shapes: list[RawShape],
                  rounds: int = 0) -> dict[str, Any]:
        try:
            cand = self.load(source, slot, candidate_id)
        except LoadError as exc:
            return {"status": "LOAD_ERROR", "reason": str(exc), "incumbent_id": self.installed_id(slot)}
        settings = self.settings if rounds <= 0 else replace(self.settings, rounds=rounds)
        # the heaviest buckets only: a benchmark's time grows with every shape it runs at
        heaviest = self.shapes(shapes, self.spec.max_shapes)
        if slot in REGIONS:  # on the region module's inputs from real steps at those shapes
            return regionbench.benchmark(self, cand, [self._forward_shape(s) for s in heaviest], settings)
        keys = None
        if self.spec.capture_shapes:  # the real-data tier: also time on inputs captured at these shapes
            fwd = [self._forward_shape(s) for s in heaviest]
            capture.capture(self, fwd, only_missing=True)
            keys = {s.key for s in fwd}
        return slotbench.benchmark(self, cand, heaviest, settings, keys)

    def run_slot(self, source: str, slot: str, candidate_id: str, input_source: str, shapes: list[RawShape],
                 seed: int = 0, max_inputs: int = 0) -> dict[str, Any]:
        if slot in REGIONS:
            return {"status": "LOAD_ERROR", "runs": [],
                    "error": f"{slot} is a region: regions are checked in benchmark and end to end (generate)"}
        cand = None
        if source.strip():
            try:
                cand = self.load(source, slot, candidate_id)
            except LoadError as exc:
                return {"status": "LOAD_ERROR", "error": str(exc), "runs": []}
        if input_source == "captured":
            if shapes:
                self.capture(shapes, only_missing=True)
            keys = {s.key for s in self.capture_shapes(shapes)} if shapes else None
            sets = self.captured.sets(slot, keys)
        else:
            sets = slotbench.random_sets(self, slot, self.shapes(shapes), seed)
        if max_inputs > 0:
            sets = sets[:max_inputs]
        return slotbench.run_slot(slot, cand, sets)

    def profile(self, shapes: list[RawShape]) -> dict[str, Any]:
        return capture.profile(self, self.capture_shapes(shapes))

    def capture_shapes(self, raw: list[RawShape]) -> list[Shape]:
        """Forward-pass shapes also respect the KV cache (batch ≤ max_batch, context < max_seq)."""
        return [self._forward_shape(s) for s in self.shapes(raw)]

    def _forward_shape(self, s: Shape) -> Shape:
        context = min(s.context, self.model.max_seq - 4)
        if s.phase == "prefill":
            return Shape("prefill", min(s.batch, self.model.max_batch), context, context, s.weight)
        return Shape("decode", min(s.batch, self.model.max_batch), 1, context, s.weight)

    def capture(self, shapes: list[RawShape], only_missing: bool = False) -> dict[str, Any]:
        return capture.capture(self, self.capture_shapes(shapes), only_missing)

    # -- generation -------------------------------------------------------------------------
    def generate(self, prompt: list[int], steps: int, overrides: list[tuple[str, str, str]],
                 reference_only: bool = False, return_logits: bool = False) -> dict[str, Any]:
        if not prompt or steps <= 0:
            raise ValueError("generate needs a non-empty prompt and steps > 0")
        if min(prompt) < 0 or max(prompt) >= self.args.vocab_size:
            raise ValueError(f"prompt tokens must lie in [0, {self.args.vocab_size})")
        if len(prompt) + steps > self.model.max_seq:
            raise ValueError(f"prompt {len(prompt)} + steps {steps} exceeds max_seq {self.model.max_seq}")
        saved, saved_regions = self.table.snapshot(), self.regions.snapshot()
        start = time.perf_counter()
        try:
            if reference_only:
                for slot in saved:
                    self.table.rollback(slot)
                for region in REGIONS:
                    self.regions.rollback(region)
            for source, slot, cid in overrides:
                try:
                    cand = self.load(source, slot, cid)
                except LoadError as exc:
                    return {"status": "LOAD_ERROR", "error": f"override {cid or slot}: {exc}"}
                if slot in REGIONS:
                    self.regions.install(slot, cand.kernel, cand.candidate_id)
                else:
                    self.table.swap(slot, cand.kernel, cand.candidate_id)
            idx = torch.tensor([prompt], dtype=torch.long, device=self.device)
            try:
                if self.graphs is not None:  # the production path: one graph replay per decode step
                    tokens, logits = graph_generate(self.graphs, idx, steps, keep_logits=return_logits)
                else:
                    tokens, logits = generate(self.model, idx, steps)
            except Exception as exc:
                return {"status": "RAISED", "error": error_line(exc)}
        finally:
            self.table.restore(saved)
            self.regions.restore(saved_regions)
        reply: dict[str, Any] = {"status": "OK", "tokens": tokens[0].tolist(),
                                 "seconds": time.perf_counter() - start}
        if return_logits and logits is not None:
            reply["logits"] = encode(logits[0].float())
        return reply

    def decode_rate(self, batch: int, steps: int = 30, blocks: int = 3) -> dict[str, Any]:
        """End-to-end decode tokens/s at one batch with the slots as installed: graph replays on a GPU
        (re-captured first if a swap invalidated the bucket), eager steps on a CPU; CUDA events or
        perf_counter around `steps` steps, median of `blocks`, the first (re-capturing) step excluded."""
        if not 1 <= batch <= self.model.max_batch or steps < 1:
            raise ValueError(f"batch must lie in [1, {self.model.max_batch}] and steps >= 1")
        pos = self.model.max_seq - 2  # attends over the whole static cache either way (graphs do)
        tok = torch.ones(batch, dtype=torch.long, device=self.device)
        began = time.perf_counter()
        captures = self.graphs.stats.captures if self.graphs else 0
        first = self._decode_step(tok, pos)
        first.tolist()
        first_s = time.perf_counter() - began
        rates = []
        for _ in range(blocks):
            seconds = self.timer.measure(lambda: [self._decode_step(tok, pos) for _ in range(steps)])
            rates.append(batch * steps / seconds)
        recaptured = (self.graphs.stats.captures - captures) if self.graphs else 0
        return {"tok_s": float(sorted(rates)[len(rates) // 2]), "rates": rates, "first_step_s": first_s,
                "recaptured": recaptured, "graphs": self.graphs is not None,
                "capture": dict(self.graphs.stats.last) if self.graphs and recaptured else {}}

    def _decode_step(self, tok: torch.Tensor, pos: int) -> torch.Tensor:
        if self.graphs is not None:
            return self.graphs.step(tok, pos)
        p = torch.tensor([pos], device=self.device)
        return self.table.sample(self.model(tok.view(-1, 1), p, kv_len=self.model.max_seq)[:, -1])
