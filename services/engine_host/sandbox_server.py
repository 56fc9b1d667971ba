"""What a sandbox does with the harness's commands (imported only after it confined itself).

Calls run `kernel(*inputs[i])` (a region: `kernel(module, *inputs[i])` on the sandbox's own model,
whose weights are a copy only sandboxes see and whose KV caches the harness owns), check the output
contract, copy each output into the harness's slab at the named slot and, on a GPU, synchronise
before answering. A decode item's call sequence runs eagerly once, then as a CUDA graph captured
from the same calls, as the live engine runs decode steps. Nothing here is trusted: the harness checks
everything it reads, and a candidate that rewrites this code only changes what its own outputs look like.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from services.common.slot_specs import OPS
from services.engine_host import capture
from services.engine_host.cuda_graphs import DecodeGraphs, buckets_for
from services.engine_host.cuda_graphs import generate as graph_generate
from services.engine_host.loader import LoadError, error_line, load_candidate
from services.engine_host.models.llama import Transformer, build_model, generate
from services.engine_host.ops import OpTable
from services.engine_host.protocol import (
    AttachModel,
    Bind,
    Calls,
    CallsDone,
    Generate,
    GenerateReport,
    Install,
    Load,
    OutputMeta,
    Profile,
    RestoreCaches,
    Rollback,
    SandboxSpec,
    Status,
    Steps,
    SwapReport,
    Unbind,
)

GRAPHED_MIN_CALLS = 4  # shorter runs of a graphed item (a switch call) stay eager: they are never timed
GRAPHS_PER_ITEM = 16  # one per distinct call sequence the harness sends (check, calibration, sample)


def contract_violation(out: Any, meta: OutputMeta, device: torch.device) -> str:
    """'' when `out` is what the op must return; the type is checked before anything else is touched
    (a tensor subclass can run code on any attribute access)."""
    if type(out) is not torch.Tensor:
        return f"output is a {type(out).__name__}, not a plain torch.Tensor"
    if tuple(out.shape) != meta.shape:
        return f"output shape {tuple(out.shape)} != {meta.shape}"
    if str(out.dtype).removeprefix("torch.") != meta.dtype:
        return f"output dtype {out.dtype} != {meta.dtype}"
    if out.device.type != device.type:
        return f"output on {out.device}, expected {device.type}"
    if not torch.ops.aten.is_non_overlapping_and_dense(out):
        return f"output strides {out.stride()} are not dense (an expanded, overlapping or gapped view)"
    if out.storage_offset() != 0 or out.untyped_storage().nbytes() != out.numel() * out.element_size():
        return "output is a view into a larger buffer"
    return ""


class SandboxServer:
    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.device = torch.device("cuda" if spec.device in ("auto", "cuda") and torch.cuda.is_available()
                                   else spec.device if spec.device != "auto" else "cpu")
        self.table = OpTable()
        self.model: Transformer | None = None
        self.graphs: DecodeGraphs | None = None
        self.items: dict[str, Bind] = {}
        self.graphs_of: dict[str, dict[tuple[tuple[int, int], ...], torch.cuda.CUDAGraph]] = {}  # item → calls → graph
        self.warmed: set[str] = set()  # graphed items that ran eagerly once
        self.capture_stream: torch.cuda.Stream | None = None
        self.kernels_dir = Path.cwd() / "kernels"
        self.seed = 0

    def handle(self, command: Any) -> Any:
        handlers: dict[type, Callable[[Any], Any]] = {
            Load: self.load, Install: self.install, Rollback: self.rollback, AttachModel: self.attach,
            Bind: self.bind, Unbind: self.unbind, Calls: self.calls, RestoreCaches: self.restore,
            Generate: self.generate, Steps: self.steps, Profile: self.profile,
        }
        handler = handlers.get(type(command))
        if handler is None:
            raise TypeError(f"a sandbox does not take {type(command).__name__}")
        return handler(command)

    # -- candidates ---------------------------------------------------------------------------
    def load(self, cmd: Load) -> SwapReport:
        began, last, backend = time.perf_counter(), None, ""
        for cand in cmd.candidates:
            try:
                loaded = load_candidate(cand.source, cand.op, self.kernels_dir, cand.candidate_id)
            except LoadError as exc:
                return SwapReport(Status.LOAD_ERROR, f"{cand.candidate_id}: {exc}")
            except BaseException as exc:  # SystemExit or worse at import: still only a load error
                return SwapReport(Status.LOAD_ERROR, f"{cand.candidate_id}: import failed: {error_line(exc)}")
            last = self.table.swap(cand.op, loaded.kernel, loaded.candidate_id)
            backend = loaded.backend
        ids = ",".join(c.candidate_id for c in cmd.candidates)
        return SwapReport(Status.OK, previous_id=last or "", installed_id=ids,
                          load_s=time.perf_counter() - began, swap_s=time.perf_counter() - began, backend=backend)

    def install(self, cmd: Install) -> SwapReport:
        report = self.load(Load((cmd.candidate,)))
        if report.status != Status.OK:
            return report
        return SwapReport(Status.OK, previous_id=report.previous_id, installed_id=cmd.candidate.candidate_id,
                          swap_s=report.swap_s, load_s=report.load_s)

    def rollback(self, cmd: Rollback) -> SwapReport:
        previous = self.table.rollback(cmd.op)
        return SwapReport(Status.OK, previous_id=previous, installed_id=self.table.installed_id(cmd.op))

    # -- model --------------------------------------------------------------------------------
    def attach(self, cmd: AttachModel) -> None:
        share = cmd.share
        max_seq = share.caches[0][0].shape[2]
        self.model = build_model(share.args, self.table, seed=0, device=str(self.device),
                                 max_batch=share.max_batch, max_seq=max_seq, weights=share.weights,
                                 caches=list(share.caches))
        if share.graphs and self.device.type == "cuda":
            self.graphs = DecodeGraphs(self.model, self.table, buckets_for(share.max_batch))

    def restore(self, cmd: RestoreCaches) -> None:
        capture.restore_caches(self._model(), cmd.caches)

    def _model(self) -> Transformer:
        if self.model is None:
            raise ValueError("no model attached to this sandbox")
        return self.model

    # -- calls --------------------------------------------------------------------------------
    def bind(self, cmd: Bind) -> None:
        if cmd.op not in OPS:
            raise KeyError(f"unknown op {cmd.op!r}")
        # the arguments that are nn.Parameters in the live model arrive as Parameters here too (the
        # same storage): a kernel cannot tell a checked call from the model's by the tensor's kind
        weights = OPS[cmd.op].weights
        inputs = tuple(tuple(nn.Parameter(a, requires_grad=False) if j in weights and isinstance(a, Tensor) else a
                             for j, a in enumerate(args)) for args in cmd.inputs)
        self.items[cmd.item] = replace(cmd, inputs=inputs)
        self.graphs_of.pop(cmd.item, None)  # captured on the old buffers: a replay would write there
        self.warmed.discard(cmd.item)

    def unbind(self, cmd: Unbind) -> None:
        self.items.pop(cmd.item, None)
        self.graphs_of.pop(cmd.item, None)
        self.warmed.discard(cmd.item)

    def calls(self, cmd: Calls) -> CallsDone:
        item = self.items.get(cmd.item)
        if item is None:
            raise KeyError(f"item {cmd.item!r} is not bound")
        fn = self.table.installed(item.op)
        if OPS[item.op].kind == "region":
            module = self.table.modules(item.op)[0]
            region_fn = fn

            def fn(*args: Any) -> Any:
                return region_fn(module, *args)
        graph_it = item.graphed and self.device.type == "cuda" and len(cmd.calls) >= GRAPHED_MIN_CALLS
        if not graph_it or cmd.item not in self.warmed:  # eager first: JIT, autotuning, library handles
            done = self._run(fn, item, cmd.calls)
            if cmd.calls and not (done.error or done.contract):
                self.warmed.add(cmd.item)
            return done
        graphs = self.graphs_of.setdefault(cmd.item, {})
        graph = graphs.get(cmd.calls)
        if graph is None:
            graph = torch.cuda.CUDAGraph()
            try:
                done = self._capture(graph, lambda: self._run(fn, item, cmd.calls, sync=False))
            except BaseException as exc:
                return CallsDone(error="cannot be captured in a CUDA graph, which decode steps run in: "
                                 + error_line(exc))
            if done.error:
                return CallsDone(error=f"while captured in a CUDA graph (decode steps run in one): {done.error}")
            if done.contract:
                return done
            if len(graphs) >= GRAPHS_PER_ITEM:
                graphs.pop(next(iter(graphs)))
            graphs[cmd.calls] = graph
        graph.replay()
        torch.cuda.synchronize(self.device)
        return CallsDone()

    def _capture(self, graph: torch.cuda.CUDAGraph, body: Callable[[], CallsDone]) -> CallsDone:
        """torch.cuda.graph without its empty_cache per capture (a dozen captures per candidate would
        hand the allocator's blocks back and malloc them again each time)."""
        if self.capture_stream is None:
            self.capture_stream = torch.cuda.Stream(self.device)
        self.capture_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.capture_stream):
            graph.capture_begin()
            try:
                done = body()
            finally:
                graph.capture_end()
        torch.cuda.current_stream(self.device).wait_stream(self.capture_stream)
        return done

    def _run(self, fn: Callable[..., Any], item: Bind, calls: tuple[tuple[int, int], ...],
             sync: bool = True) -> CallsDone:
        for i, slot in calls:
            try:
                out = fn(*item.inputs[i])
            except BaseException as exc:  # SystemExit from a kernel is still the kernel raising
                return CallsDone(error=error_line(exc))
            outs = out if type(out) is tuple else (out,)
            if len(outs) != len(item.expect):
                return CallsDone(contract=f"returned {len(outs)} output(s), the op returns {len(item.expect)}")
            for o, meta, slab in zip(outs, item.expect, item.outputs, strict=True):
                why = contract_violation(o, meta, self.device)
                if why:
                    return CallsDone(contract=why)
                slab[slot].copy_(o)
        if sync and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return CallsDone()

    # -- generation -----------------------------------------------------------------------------
    def generate(self, cmd: Generate) -> GenerateReport:
        from services.common.tensors import encode

        model = self._model()
        start = time.perf_counter()
        idx = torch.tensor([list(cmd.prompt)], dtype=torch.long, device=self.device)
        try:
            if self.graphs is not None:
                tokens, logits = graph_generate(self.graphs, idx, cmd.steps, keep_logits=cmd.return_logits)
            else:
                tokens, logits = generate(model, idx, cmd.steps)
        except BaseException as exc:
            return GenerateReport(Status.RAISED, error_line(exc))
        encoded = encode(logits[0].float()) if cmd.return_logits and logits is not None else None
        return GenerateReport(Status.OK, tokens=tuple(tokens[0].tolist()), logits=encoded,
                              seconds=time.perf_counter() - start)

    def steps(self, cmd: Steps) -> dict[str, Any]:
        """Decode steps at one batch, the graph re-captured first where a swap invalidated it."""
        model = self._model()
        if not 1 <= cmd.batch <= model.max_batch or cmd.steps < 0:
            raise ValueError(f"batch must lie in [1, {model.max_batch}] and steps >= 0")
        pos = model.max_seq - 2  # attends over the whole static cache either way (graphs do)
        tok = torch.ones(cmd.batch, dtype=torch.long, device=self.device)
        captures = self.graphs.stats.captures if self.graphs else 0
        for _ in range(cmd.steps):
            self._decode_step(tok, pos)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        recaptured = (self.graphs.stats.captures - captures) if self.graphs else 0
        return {"recaptured": recaptured, "graphs": self.graphs is not None,
                "capture": dict(self.graphs.stats.last) if self.graphs and recaptured else {}}

    def _decode_step(self, tok: Tensor, pos: int) -> Tensor:
        if self.graphs is not None:
            return self.graphs.step(tok, pos)
        model = self._model()
        p = torch.tensor([pos], device=self.device)
        return self.table.sample(model(tok.view(-1, 1), p, kv_len=model.max_seq)[:, -1])

    def profile(self, cmd: Profile) -> Any:
        return capture.profile(capture.ModelView(self._model(), self.table, self.graphs, self.device, self.seed,
                                                 lambda _: None), list(cmd.shapes))
