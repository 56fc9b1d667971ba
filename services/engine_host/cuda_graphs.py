"""CUDA graphs of the decode step, one per batch bucket, and of prefill, one per (batch, prompt-length
bucket); each re-captured only where a swap invalidated it.

Each graph remembers which slots (and regions) its step called and the table's per-slot version of
each at capture time. A swap bumps one slot's version; the next step in a bucket compares its
snapshot with the table and re-captures only if a slot it actually uses changed (lazily: a bucket
that is never run again is never re-captured). The decode step attends over the whole static KV
cache with a causal mask (gpt-fast style), so positions are tensors and one graph serves every step.

Prefill pads the prompt up to its length bucket (the model keeps the logits of the prompt's own last
position): the padding writes K/V past the prompt, which every later step masks (its causal mask ends
at its own position) and decode overwrites before any step reads it. Without graphs an eager prefill
costs ~2x its device time at a 1k prompt on an H100 (host-bound launches), which torch.compile's
graphs do not pay.

On a CPU (or with `use_graphs=False`) the same bookkeeping and padding run eagerly, so the
invalidation and padding logic are testable without a GPU.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from services.common.slot_specs import REGIONS, SLOTS
from services.engine_host.ops import OpTable


@dataclass
class Capture:
    bucket: int
    versions: dict[str, int]  # op name (slot or region) → its version at capture
    tokens: Tensor  # static input [bucket, 1]
    pos: Tensor  # static input [1]
    out: Tensor | None = None  # static output [bucket] next tokens
    logits: Tensor | None = None  # static output [bucket, V] float32 logits behind `out`
    graph: Any = None  # torch.cuda.CUDAGraph, None when eager
    capture_s: float = 0.0
    slot_args: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # each slot's first call, eager


@dataclass
class GraphStats:
    captures: int = 0
    replays: int = 0
    eager_steps: int = 0
    capture_s: list[float] = field(default_factory=list)
    recaptured: list[int] = field(default_factory=list)  # buckets re-captured after a swap
    last: dict[str, Any] = field(default_factory=dict)  # the last capture's stages (warm-up, capture)


PREFILL_ALIGN = 64  # prompt lengths round up to a multiple of this: one graph serves its whole bucket
PREFILL_MAX_TOKENS = 4096  # batch x bucket above which prefill stays eager (a graph keeps its activations)
PREFILL_KEEP = 4  # prefill graphs kept; the least recently used is dropped first


@dataclass
class PrefillCapture:
    versions: dict[str, int]  # op name → its version at capture
    tokens: Tensor  # static input [B, bucket]
    last: Tensor  # static input [1]: the prompt's last position inside the bucket
    out: Tensor | None = None  # static output [B] first generated tokens
    logits: Tensor | None = None  # static output [B, V] float32
    graph: Any = None


@contextmanager
def recording(table: OpTable, used: set[str], args: dict[str, tuple[Any, ...]] | None = None) -> Iterator[None]:
    """Note every slot and region a forward pass calls (what a graph depends on) and, when `args` is
    given, each slot's first call arguments (what a targeted warm-up re-runs after a swap)."""
    used.update(REGIONS)  # every step runs through all four regions' modules

    def wrap(slot: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def rec(*a: Any) -> Any:
            used.add(slot)
            if args is not None and slot not in args:
                args[slot] = a
            return fn(*a)
        return rec

    with table.wrapped(wrap), table.recording(used):
        yield


def buckets_for(max_batch: int) -> list[int]:
    """Powers of two up to max_batch (and max_batch itself): a batch runs in the smallest bucket ≥ it."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return [*out, max_batch]


class DecodeGraphs:
    def __init__(self, model: Any, table: OpTable, buckets: list[int], *,
                 use_graphs: bool | None = None) -> None:
        self.model, self.table = model, table
        self.buckets = sorted(set(buckets))
        if self.buckets[-1] > model.max_batch:
            raise ValueError(f"bucket {self.buckets[-1]} exceeds the KV cache's max batch {model.max_batch}")
        self.device = model.output.device
        self.use_graphs = (self.device.type == "cuda") if use_graphs is None else use_graphs
        self.captures: dict[int, Capture] = {}
        self.stats = GraphStats()
        # looked up on every call, never bound once: a swapped `sample` must reach the graphs too
        self._sample: Callable[[Tensor], Tensor] = lambda logits: table.sample(logits)
        self.prefill = PrefillGraphs(model, table, self.use_graphs)

    # -- bookkeeping --------------------------------------------------------------------------
    def bucket(self, batch: int) -> int:
        for b in self.buckets:
            if b >= batch:
                return b
        raise ValueError(f"batch {batch} exceeds the largest bucket {self.buckets[-1]}")

    def _current(self, keys: list[str]) -> dict[str, int]:
        return {key: self.table.versions[key] for key in keys}

    def valid(self, bucket: int) -> bool:
        cap = self.captures.get(bucket)
        return cap is not None and self._current(list(cap.versions)) == cap.versions

    def invalid_buckets(self) -> list[int]:
        return [b for b in self.captures if not self.valid(b)]

    # -- the step -----------------------------------------------------------------------------
    def _forward(self, tokens: Tensor, pos: Tensor) -> Tensor:
        return self._forward_logits(tokens, pos)[0]

    def _forward_logits(self, tokens: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        logits = self.model(tokens, pos, kv_len=self.model.max_seq)[:, -1]  # [b,V] float32
        return self._sample(logits), logits

    def _changed_slots(self, old: Capture) -> list[str] | None:
        """The slots whose version moved since `old` was captured; None when a region moved or a moved
        slot's arguments were never recorded (then only a whole eager step is a safe warm-up)."""
        now = self._current(list(old.versions))
        moved = [k for k in old.versions if now.get(k) != old.versions[k]]
        slots = [k for k in moved if k in SLOTS]
        if len(slots) != len(moved) or any(s not in old.slot_args for s in slots):
            return None
        return slots

    def _capture(self, bucket: int, tokens: Tensor, pos: Tensor, old: Capture | None = None) -> Capture:
        began = time.perf_counter()
        cap = Capture(bucket, {}, tokens.clone(), pos.clone())
        used: set[str] = set()
        changed = self._changed_slots(old) if old is not None else None
        stage: dict[str, float] = {}
        if not self.use_graphs:  # eager: one recording step tells which slots the bucket depends on
            with recording(self.table, used, cap.slot_args):
                self._forward(cap.tokens, cap.pos)
        else:
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            self._warm(cap, used, stream, changed, old)
            stage["warm_s"] = time.perf_counter() - began
            try:
                self._graph(cap, used)
            except RuntimeError:
                if changed is None:
                    raise
                # an op downstream of the swap met new strides and compiled inside the capture: warm the
                # whole step and capture again
                torch.cuda.synchronize(self.device)
                changed, cap.slot_args = None, {}
                self._warm(cap, used, stream, None, None)
                self._graph(cap, used)
            stage["capture_s"] = time.perf_counter() - began - stage["warm_s"]
        cap.versions = self._current(sorted(used))  # read after the runs: a racing swap would show as stale
        cap.capture_s = time.perf_counter() - began
        self.stats.captures += 1
        self.stats.capture_s.append(cap.capture_s)
        self.stats.last = {**stage, "total_s": cap.capture_s, "targeted_warmup": changed is not None,
                           "warmed_slots": changed or []}
        return cap

    def _warm(self, cap: Capture, used: set[str], stream: Any, changed: list[str] | None,
              old: Capture | None) -> None:
        """Warm-up off the capture (JIT, cuBLAS handles, allocator) on a side stream."""
        with torch.cuda.stream(stream):
            if changed is not None and old is not None:
                # a slot swap: only the new ops need warming, on the arguments this bucket gave them last
                # time (real values from an eager step, so index-like inputs stay in range)
                for slot in changed:
                    getattr(self.table, slot)(*old.slot_args[slot])
                cap.slot_args = old.slot_args
            else:
                with recording(self.table, used, cap.slot_args):
                    self._forward(cap.tokens, cap.pos)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)

    def _graph(self, cap: Capture, used: set[str]) -> None:
        graph = torch.cuda.CUDAGraph()
        with recording(self.table, used), torch.cuda.graph(graph):
            cap.out, cap.logits = self._forward_logits(cap.tokens, cap.pos)
        cap.graph = graph
        torch.cuda.synchronize(self.device)

    def ensure(self, bucket: int) -> bool:
        """Capture the bucket's graph if missing or stale; True when it (re)captured."""
        if self.valid(bucket):
            return False
        old = self.captures.pop(bucket, None)
        if old is not None:
            self.stats.recaptured.append(bucket)
            tokens, pos = old.tokens, old.pos
            old.graph = old.out = old.logits = None  # free the stale graph's memory before capturing anew
        else:
            tokens = torch.ones(bucket, 1, dtype=torch.long, device=self.device)
            pos = torch.empty(1, dtype=torch.long, device=self.device)
        # the last cache position: capture's own steps must not overwrite a prefilled prompt (a
        # re-capture too: the old static pos holds the last decoded position, inside a live prompt)
        pos.fill_(self.model.max_seq - 1)
        self.captures[bucket] = self._capture(bucket, tokens, pos, old)
        return True

    def step(self, tokens: Tensor, pos: int | Tensor) -> Tensor:
        """tokens [B] (or [B,1]) at position pos → next tokens [B]; rows past B in the bucket are padding."""
        tokens = tokens.reshape(-1)
        B = tokens.numel()
        bucket = self.bucket(B)
        self.ensure(bucket)
        cap = self.captures[bucket]
        cap.tokens[:B, 0].copy_(tokens)
        if isinstance(pos, Tensor):
            cap.pos.copy_(pos.reshape(1))
        else:
            cap.pos.fill_(pos)
        if cap.graph is not None:
            cap.graph.replay()
            self.stats.replays += 1
            assert cap.out is not None
            return cap.out[:B]
        self.stats.eager_steps += 1
        cap.out, cap.logits = self._forward_logits(cap.tokens, cap.pos)
        return cap.out[:B]

    def logits(self, batch: int) -> Tensor:
        """The float32 logits [batch, V] behind the last step's tokens in that batch's bucket."""
        cap = self.captures[self.bucket(batch)]
        assert cap.logits is not None, "no step has run in this bucket"
        return cap.logits[:batch]


def prefill(model: Any, sample: Callable[[Tensor], Tensor], prompt: Tensor) -> Tensor:
    """prompt [B,P] → the first generated token [B]; fills the KV cache positions [0, P)."""
    P = prompt.size(1)
    logits = model(prompt, torch.arange(P, device=prompt.device), kv_len=P, last_only=True)[:, -1]
    return sample(logits)


def decode(graphs: DecodeGraphs, prompt: Tensor, steps: int) -> Tensor:
    """Greedy generation through the graphs: prompt [B,P] → tokens [B, steps]."""
    return generate(graphs, prompt, steps, keep_logits=False)[0]


def generate(graphs: DecodeGraphs, prompt: Tensor, steps: int,
             keep_logits: bool = True) -> tuple[Tensor, Tensor | None]:
    """Greedy: prefill and one graph replay per token; (tokens [B,steps], logits [B,steps,V] or None).

    Same contract as models.llama.generate (the logits behind each token), so the worker's Generate
    runs through the graphs on a GPU and stays eager on a CPU.
    """
    model = graphs.model
    B, P = prompt.shape
    if P + steps > model.max_seq:
        raise ValueError(f"prompt {P} + steps {steps} exceeds max_seq {model.max_seq}")
    token, logits = graphs.prefill.run(prompt)
    token, logits = token.clone(), logits.clone()  # the graph's static outputs: the next prefill reuses them
    tokens, all_logits = [token], [logits] if keep_logits else []
    for i in range(steps - 1):
        token = graphs.step(token, P + i).clone()
        tokens.append(token)
        if keep_logits:
            all_logits.append(graphs.logits(B).clone())
    return torch.stack(tokens, dim=1), (torch.stack(all_logits, dim=1) if keep_logits else None)


class PrefillGraphs:
    """Prefill through CUDA graphs, one per (batch, prompt length rounded up to PREFILL_ALIGN), captured
    on first use and again when an op it calls was swapped; the last PREFILL_KEEP are kept."""

    def __init__(self, model: Any, table: OpTable, use_graphs: bool) -> None:
        self.model, self.table, self.use_graphs = model, table, use_graphs
        self.device = model.output.device
        self.captures: OrderedDict[tuple[int, int], PrefillCapture] = OrderedDict()
        self.stats = GraphStats()

    def bucket_len(self, prompt_len: int) -> int:
        return min(-(-prompt_len // PREFILL_ALIGN) * PREFILL_ALIGN, self.model.max_seq)

    def valid(self, key: tuple[int, int]) -> bool:
        cap = self.captures.get(key)
        return cap is not None and all(self.table.versions[k] == v for k, v in cap.versions.items())

    def _forward(self, cap: PrefillCapture) -> tuple[Tensor, Tensor]:
        L = cap.tokens.size(1)
        logits = self.model(cap.tokens, torch.arange(L, device=self.device), kv_len=L, last_only=cap.last)[:, -1]
        return self.table.sample(logits), logits

    def run(self, prompt: Tensor) -> tuple[Tensor, Tensor]:
        """prompt [B,P] → (first generated tokens [B], their float32 logits [B,V]); fills the KV cache
        positions [0, P) (and, padding, up to the bucket's end). Outputs are static: clone to keep."""
        B, P = prompt.shape
        length = self.bucket_len(P)
        key = (B, length)
        if B * length > PREFILL_MAX_TOKENS or length < P:  # too big to keep a graph of, or past the cache
            self.stats.eager_steps += 1
            logits = self.model(prompt, torch.arange(P, device=self.device), kv_len=P, last_only=True)[:, -1]
            return self.table.sample(logits), logits
        cap = self.captures.get(key) if self.valid(key) else None
        if cap is None:
            stale = self.captures.pop(key, None)
            if stale is not None:
                stale.graph = stale.out = stale.logits = None  # free the stale graph before capturing anew
                self.stats.recaptured.append(B)
            cap = PrefillCapture({}, torch.zeros(key, dtype=torch.long, device=self.device),
                                 torch.zeros(1, dtype=torch.long, device=self.device))
        cap.tokens[:, :P].copy_(prompt)
        cap.tokens[:, P:].zero_()
        cap.last.fill_(P - 1)
        if not self.use_graphs:
            self.stats.eager_steps += 1
            return self._forward(cap)
        if cap.graph is None:
            self._capture(cap)
            self.captures[key] = cap
            while len(self.captures) > PREFILL_KEEP:
                _, dropped = self.captures.popitem(last=False)
                dropped.graph = dropped.out = dropped.logits = None
        self.captures.move_to_end(key)
        cap.graph.replay()
        self.stats.replays += 1
        assert cap.out is not None and cap.logits is not None
        return cap.out, cap.logits

    def _capture(self, cap: PrefillCapture) -> None:
        began, used = time.perf_counter(), set[str]()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream), recording(self.table, used):  # warm-up off the capture
            self._forward(cap)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with recording(self.table, used), torch.cuda.graph(graph):
            cap.out, cap.logits = self._forward(cap)
        torch.cuda.synchronize(self.device)
        cap.graph = graph
        cap.versions = {k: self.table.versions[k] for k in sorted(used)}
        self.stats.captures += 1
        self.stats.capture_s.append(time.perf_counter() - began)
