"""Real forward passes inside a worker: capture each slot's inputs, and profile per-slot time.

Capture runs the model at traffic shapes (prefill on prompts, then decode steps), records a few
cloned argument sets per slot and keeps them as named input sets ("captured:<n>") for RunSlot and
the verifier. Profile wraps every slot with a timer for a few steps and times whole steps unwrapped.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from services.engine_host.inputs import Shape, clone_args

if TYPE_CHECKING:
    from services.engine_host.runtime import Runtime

PER_SIGNATURE = 2  # argument sets kept per distinct argument shape (e.g. two layers' worth)


@dataclass
class Captured:
    input_id: str
    shape_key: str
    args: tuple[Any, ...]


class CaptureStore:
    """Per slot, captured argument sets in insertion order; ids stay stable until re-captured."""

    def __init__(self, per_slot: int) -> None:
        self.per_slot = per_slot
        self._sets: dict[str, list[Captured]] = defaultdict(list)
        self._next: dict[str, int] = defaultdict(int)
        self._shapes: set[str] = set()
        self.weights: dict[str, float] = {}  # shape key → its traffic weight (how captured items are weighted)

    def has(self, shape_key: str) -> bool:
        return shape_key in self._shapes

    def replace(self, shape_key: str, recorded: dict[str, list[tuple[Any, ...]]], weight: float = 1.0) -> None:
        self.weights[shape_key] = weight
        for slot in list(self._sets):
            self._sets[slot] = [c for c in self._sets[slot] if c.shape_key != shape_key]
        for slot, arg_sets in recorded.items():
            for args in arg_sets:
                self._sets[slot].append(Captured(f"captured:{self._next[slot]}", shape_key, args))
                self._next[slot] += 1
        self._shapes.add(shape_key)

    def sets(self, slot: str, shape_keys: set[str] | None = None) -> list[tuple[str, tuple[Any, ...]]]:
        return [(c.input_id, c.args) for c in self._sets.get(slot, [])
                if shape_keys is None or c.shape_key in shape_keys]

    def grouped(self, slot: str, shape_keys: set[str] | None = None) -> dict[tuple[str, tuple[Any, ...]],
                                                                              list[tuple[Any, ...]]]:
        """Captured argument sets by (shape key, argument shapes): one timed work item per group."""
        out: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = defaultdict(list)
        for c in self._sets.get(slot, []):
            if shape_keys is None or c.shape_key in shape_keys:
                out[(c.shape_key, _signature(c.args))].append(c.args)
        return out

    def counts(self) -> dict[str, int]:
        return {slot: len(v) for slot, v in self._sets.items()}


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(tuple(a.shape) if isinstance(a, Tensor) else a for a in args)


def _tokens(rt: Runtime, shape: Shape) -> Tensor:
    g = torch.Generator().manual_seed(rt.spec.seed * 7919 + shape.batch * 100_003 + shape.context)
    return torch.randint(0, rt.args.vocab_size, (shape.batch, shape.context), generator=g).to(rt.device)


@contextmanager
def at_shape(rt: Runtime, shape: Shape) -> Iterator[Callable[[], Tensor]]:
    """Prepare the KV cache for `shape` and yield a function that runs one step at it."""
    tokens, model, dev = _tokens(rt, shape), rt.model, rt.device
    T = shape.context
    if shape.phase == "prefill":
        pos = torch.arange(T, device=dev)

        def step() -> Tensor:
            logits = model(tokens, pos, kv_len=T, last_only=True)[:, -1]
            return rt.table.sample(logits)
    else:
        if T > 1:
            model(tokens[:, : T - 1], torch.arange(T - 1, device=dev), kv_len=T - 1, last_only=True)
        pos = torch.tensor([T - 1], device=dev)

        def step() -> Tensor:  # decode at position T-1 again and again: context stays T
            logits = model(tokens[:, T - 1 :], pos, kv_len=T)[:, -1]
            return rt.table.sample(logits)

    yield step


def _recorder(recorded: dict[str, list[tuple[Any, ...]]], per_slot: int) -> Callable[..., Any]:
    seen: dict[tuple[str, tuple[Any, ...]], int] = defaultdict(int)

    def wrap(slot: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def recorder(*args: Any) -> Any:
            key = (slot, _signature(args))
            if seen[key] < PER_SIGNATURE and len(recorded[slot]) < per_slot:
                seen[key] += 1
                recorded[slot].append(clone_args(args))
            return fn(*args)

        return recorder

    return wrap


def capture(rt: Runtime, shapes: list[Shape], only_missing: bool = False) -> dict[str, Any]:
    done = []
    for shape in shapes:
        if only_missing and rt.captured.has(shape.key):
            continue
        recorded: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        with torch.inference_mode(), at_shape(rt, shape) as step, \
                rt.table.wrapped(_recorder(recorded, rt.captured.per_slot)):
            step()
            if shape.phase == "decode":
                step()
        rt.captured.replace(shape.key, recorded, shape.weight)
        done.append(shape.key)
        rt.progress(f"captured {shape.key}")
    return {"captured": done, "counts": rt.captured.counts()}


def _sync(rt: Runtime) -> None:
    if rt.device.type == "cuda":
        torch.cuda.synchronize(rt.device)


def _timer(rt: Runtime, acc: dict[str, float], calls: dict[str, int]) -> Callable[..., Any]:
    def wrap(slot: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            _sync(rt)
            start = time.perf_counter()
            out = fn(*args)
            _sync(rt)
            acc[slot] += time.perf_counter() - start
            calls[slot] += 1
            return out

        return timed

    return wrap


def profile(rt: Runtime, shapes: list[Shape], steps: int = 5) -> dict[str, Any]:
    """Per-slot time per step (sum over its calls) and whole-step time, at each shape."""
    times: list[dict[str, Any]] = []
    step_total, weight_total = 0.0, 0.0
    eager_us: dict[str, float] = {}  # decode shapes timed through graphs: their eager step, for reference
    for shape in shapes:
        per_step: dict[str, list[float]] = defaultdict(list)
        calls: dict[str, int] = defaultdict(int)
        acc: dict[str, float] = defaultdict(float)
        wrap = _timer(rt, acc, calls)
        with torch.inference_mode(), at_shape(rt, shape) as step:
            step()  # warm-up
            with rt.table.wrapped(wrap):
                for _ in range(steps):
                    acc.clear()
                    step()
                    for slot, seconds in acc.items():
                        per_step[slot].append(seconds)
            plain = []
            for _ in range(steps):
                _sync(rt)
                start = time.perf_counter()
                step()
                _sync(rt)
                plain.append(time.perf_counter() - start)
            if rt.graphs is not None and shape.phase == "decode":
                # what a decode step costs in production: one replay of the bucket's CUDA graph
                eager_us[shape.key] = float(np.median(plain)) * 1e6
                last = _tokens(rt, shape)[:, -1]
                rt.graphs.step(last, shape.context - 1)  # (re)captures the bucket if needed
                plain = []
                for _ in range(steps):
                    _sync(rt)
                    start = time.perf_counter()
                    rt.graphs.step(last, shape.context - 1)
                    _sync(rt)
                    plain.append(time.perf_counter() - start)
        for slot, values in per_step.items():
            times.append({"slot": slot, "shape": shape, "median_us": float(np.median(values)) * 1e6,
                          "calls_per_step": calls[slot] // steps})
        step_total += float(np.median(plain)) * 1e6 * shape.weight
        weight_total += shape.weight
        rt.progress(f"profiled {shape.key}")
    return {"times": [{**t, "shape": (t["shape"].phase, t["shape"].batch, t["shape"].context,
                                       t["shape"].weight)} for t in times],
            "step_us": step_total / max(weight_total, 1e-12), "graphs": rt.graphs is not None,
            "eager_step_us": eager_us}
