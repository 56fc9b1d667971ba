"""Real forward passes: capture each op's inputs (harness), and profile per-op time (live engine).

Capture runs the model at traffic shapes (prefill on prompts, then decode steps), records a few
cloned argument sets per slot, and each region module's first call with the KV cache it read, and
keeps them as named input sets ("captured:<n>") for benchmarks, RunOp and the verifier. Profile
attributes a few steps' time to every slot and region, and times whole steps unwrapped (on a GPU
through the bucket's CUDA graph, as production runs them).

On a GPU the attribution is device time: the kernels between marker kernels launched around each
slot call and region forward, from torch's profiler (a synchronise around every call would add its
launch and sync to every small op, and an eager op's launch overhead is what the graphs remove: rope
looked like 80 % of a step). On the CPU, where an op's time is its wall time, each call is timed.
"""

from __future__ import annotations

import inspect
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor

from services.common.shapes import Shape
from services.common.slot_specs import REGIONS
from services.engine_host.cuda_graphs import DecodeGraphs
from services.engine_host.inputs import clone_args
from services.engine_host.models.llama import Transformer
from services.engine_host.ops import OpTable
from services.engine_host.protocol import OpTime, ProfileReport, ShapeStep

PER_SIGNATURE = 2  # argument sets kept per distinct argument shape (e.g. two layers' worth)
CacheState = tuple[tuple[int, Tensor, Tensor], ...]  # (layer, k_cache, v_cache) clones


@dataclass
class ModelView:
    """What running a model at a shape needs (the harness's reference model, or a live engine's)."""

    model: Transformer
    table: OpTable
    graphs: DecodeGraphs | None
    device: torch.device
    seed: int
    progress: Callable[[str], None]


@dataclass
class Captured:
    input_id: str
    shape_key: str
    args: tuple[Any, ...]
    caches: CacheState = ()  # regions: the KV state their module read


class CaptureStore:
    """Per op, captured argument sets in insertion order; ids stay stable until re-captured."""

    def __init__(self, per_slot: int) -> None:
        self.per_slot = per_slot
        self._sets: dict[str, list[Captured]] = defaultdict(list)
        self._next: dict[str, int] = defaultdict(int)
        self._shapes: set[str] = set()
        self.weights: dict[str, float] = {}  # shape key → its traffic weight (how captured items are weighted)

    def has(self, shape_key: str) -> bool:
        return shape_key in self._shapes

    def replace(self, shape_key: str, recorded: dict[str, list[Captured]], weight: float = 1.0) -> None:
        self.weights[shape_key] = weight
        for op in list(self._sets):
            self._sets[op] = [c for c in self._sets[op] if c.shape_key != shape_key]
        for op, sets in recorded.items():
            for c in sets:
                self._sets[op].append(Captured(f"captured:{self._next[op]}", shape_key, c.args, c.caches))
                self._next[op] += 1
        self._shapes.add(shape_key)

    def sets(self, op: str, shape_keys: set[str] | None = None) -> list[Captured]:
        return [c for c in self._sets.get(op, []) if shape_keys is None or c.shape_key in shape_keys]

    def grouped(self, op: str, shape_keys: set[str] | None = None) -> dict[tuple[str, tuple[Any, ...]],
                                                                          list[Captured]]:
        """Captured sets by (shape key, argument shapes): one timed work item per group."""
        out: dict[tuple[str, tuple[Any, ...]], list[Captured]] = defaultdict(list)
        for c in self.sets(op, shape_keys):
            out[(c.shape_key, signature_of(c.args))].append(c)
        return out

    def counts(self) -> dict[str, int]:
        return {op: len(v) for op, v in self._sets.items()}


def signature_of(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(tuple(a.shape) if isinstance(a, Tensor) else a for a in args)


def _tokens(rt: ModelView, shape: Shape) -> Tensor:
    g = torch.Generator().manual_seed(rt.seed * 7919 + shape.batch * 100_003 + shape.context)
    return torch.randint(0, rt.model.args.vocab_size, (shape.batch, shape.context), generator=g).to(rt.device)


@contextmanager
def at_shape(rt: ModelView, shape: Shape) -> Iterator[Callable[[], Tensor]]:
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


def _recorder(recorded: dict[str, list[Captured]], per_slot: int) -> Callable[..., Any]:
    seen: dict[tuple[str, tuple[Any, ...]], int] = defaultdict(int)

    def wrap(slot: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def recorder(*args: Any) -> Any:
            key = (slot, signature_of(args))
            if seen[key] < PER_SIGNATURE and len(recorded[slot]) < per_slot:
                seen[key] += 1
                recorded[slot].append(Captured("", "", clone_args(args)))
            return fn(*args)

        return recorder

    return wrap


def region_layers(model: Transformer, region: str) -> list[int]:
    """The layers whose KV cache a region's first module reads (all of them for `step`)."""
    if region == "step":
        return list(range(len(model.layers)))
    return [0] if region in ("attn_block", "layer") else []


def cache_state(model: Transformer, layers: list[int], batch: int) -> CacheState:
    """The rows a step of `batch` sequences reads (the static cache is sized for the largest batch:
    a whole-cache copy per captured region at batch 1 would cost max_batch times what it reads)."""
    out = []
    for i in layers:
        cache = model.kv_cache(i)
        out.append((i, cache.k_cache[:batch].clone(), cache.v_cache[:batch].clone()))
    return tuple(out)


def restore_caches(model: Transformer, state: CacheState) -> None:
    for i, k, v in state:
        cache = model.kv_cache(i)
        cache.k_cache[: k.shape[0]].copy_(k)
        cache.v_cache[: v.shape[0]].copy_(v)


def _region_hooks(rt: ModelView, recorded: dict[str, list[Captured]]) -> list[Any]:
    """Pre-hooks that keep each region module's first call of the step, with the KV state it reads."""
    handles = []
    for region in REGIONS:
        module = rt.table.modules(region)[0]
        signature = inspect.signature(type(module).forward)

        def hook(mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], region: str = region,
                 signature: inspect.Signature = signature) -> None:
            if not recorded[region]:
                bound = signature.bind(mod, *args, **kwargs)
                bound.apply_defaults()
                args = tuple(bound.arguments.values())[1:]
                batch = int(args[0].shape[0])  # x [B,S,E] (blocks) or token ids [B,S] (step)
                recorded[region].append(Captured("", "", clone_args(args),
                                                 cache_state(rt.model, region_layers(rt.model, region), batch)))

        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    return handles


def capture(rt: ModelView, store: CaptureStore, shapes: list[Shape], only_missing: bool = False) -> list[str]:
    """Record every op's inputs from a real step at each shape (decode: the second of two steps)."""
    done = []
    for shape in shapes:
        if only_missing and store.has(shape.key):
            continue
        recorded: dict[str, list[Captured]] = defaultdict(list)
        with torch.inference_mode(), at_shape(rt, shape) as step:
            if shape.phase == "decode":
                step()  # the first decode step leaves the cache as every later one reads it
            handles = _region_hooks(rt, recorded)
            try:
                with rt.table.wrapped(_recorder(recorded, store.per_slot)):
                    step()
            finally:
                for h in handles:
                    h.remove()
        store.replace(shape.key, recorded, shape.weight)
        done.append(shape.key)
        rt.progress(f"captured {shape.key}")
    return done


def _sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timer(rt: ModelView, acc: dict[str, float], calls: dict[str, int]) -> Callable[..., Any]:
    def wrap(slot: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            _sync_device(rt.device)
            start = time.perf_counter()
            out = fn(*args)
            _sync_device(rt.device)
            acc[slot] += time.perf_counter() - start
            calls[slot] += 1
            return out

        return timed

    return wrap


Hook = Callable[..., None]


@contextmanager
def _on_regions(rt: ModelView, pre_for: Callable[[str], Hook] | None = None,
                post_for: Callable[[str], Hook] | None = None, with_kwargs: bool = False) -> Iterator[None]:
    """Forward pre- and post-hooks (made per region name) on every region module, removed on exit."""
    handles = []
    for region in REGIONS:
        for module in rt.table.modules(region):
            if pre_for is not None:
                handles.append(module.register_forward_pre_hook(pre_for(region), with_kwargs=with_kwargs))
            if post_for is not None:
                handles.append(module.register_forward_hook(post_for(region), with_kwargs=with_kwargs))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _region_timers(rt: ModelView, acc: dict[str, float], calls: dict[str, int]) -> AbstractContextManager[None]:
    """Time every region's modules (their whole forward, the slots inside included): a region candidate
    can replace all of it, so that is the time it has at stake."""
    starts: dict[int, float] = {}

    def pre(module: torch.nn.Module, args: Any) -> None:
        _sync_device(rt.device)
        starts[id(module)] = time.perf_counter()

    def post_for(region: str) -> Hook:
        def post(module: torch.nn.Module, args: Any, out: Any) -> None:
            _sync_device(rt.device)
            acc[region] += time.perf_counter() - starts.pop(id(module))
            calls[region] += 1

        return post

    return _on_regions(rt, lambda _: pre, post_for)


def _step_times(rt: ModelView, run: Callable[[], Any], steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        _sync_device(rt.device)
        start = time.perf_counter()
        run()
        _sync_device(rt.device)
        times.append(time.perf_counter() - start)
    return times


MARKER_KERNEL = "spin_kernel"  # what torch.cuda._sleep launches: a name no model kernel has


@dataclass(frozen=True)
class DeviceKernel:
    """One kernel (or copy) the profiler saw on the device, in stream order."""

    name: str
    start_us: float
    duration_us: float


Mark = tuple[bool, str]  # (entering?, slot or region name), in the order the markers were launched


@contextmanager
def _marked(rt: ModelView, marks: list[Mark]) -> Iterator[None]:
    """A marker kernel on the stream before and after every slot call and region forward. Attribution
    then needs only the kernels' order on the one stream, not the profiler's link from a kernel to the
    CPU range that launched it: that link is missing for Triton's driver-API launches, which made a
    whole promoted `layer` region (Triton only) count as zero device time."""

    def mark(entering: bool, name: str) -> None:
        torch.cuda._sleep(0)
        marks.append((entering, name))

    def wrap(slot: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def marked(*args: Any) -> Any:
            mark(True, slot)
            out = fn(*args)
            mark(False, slot)
            return out

        return marked

    def pre_for(region: str) -> Hook:
        return lambda module, args: mark(True, region)

    def post_for(region: str) -> Hook:
        return lambda module, args, out: mark(False, region)

    with _on_regions(rt, pre_for, post_for), rt.table.wrapped(wrap):
        yield


def attribute(kernels: list[DeviceKernel], marks: list[Mark]) -> tuple[dict[str, float], dict[str, int]]:
    """Device µs and calls per slot/region: every kernel between a name's enter and exit markers counts
    for it (nested names included, each name once), markers excluded. Raises when the markers on the
    device do not match those launched (another stream, a dropped event): the caller falls back."""
    ordered = sorted(kernels, key=lambda k: k.start_us)
    seen = [k for k in ordered if MARKER_KERNEL in k.name]
    if len(seen) != len(marks):
        raise RuntimeError(f"{len(seen)} marker kernels on the device, {len(marks)} launched")
    total: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    open_names: dict[str, int] = defaultdict(int)
    it = iter(marks)
    for k in ordered:
        if MARKER_KERNEL in k.name:
            entering, name = next(it)
            if entering:
                open_names[name] += 1
                calls[name] += 1
            elif open_names[name] == 0:
                raise RuntimeError(f"marker for {name!r} closes a range that never opened")
            else:
                open_names[name] -= 1
            continue
        for name, depth in open_names.items():
            if depth:
                total[name] += k.duration_us
    return dict(total), dict(calls)


def _device_times(rt: ModelView, step: Callable[[], Any], steps: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per slot and region: device µs per step (every kernel its calls launched, nested ones included)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    marks: list[Mark] = []
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with _marked(rt, marks):
            for _ in range(steps):
                step()
        _sync_device(rt.device)
    kernels = [DeviceKernel(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
               if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    total, count = attribute(kernels, marks)
    if not any(total.values()):
        raise RuntimeError("the profiler saw no kernels (no CUPTI?)")
    return {k: [v / steps] for k, v in total.items()}, count


def _wall_times(rt: ModelView, step: Callable[[], Any], steps: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per slot and region: wall µs per step, each call between synchronises."""
    per_step: dict[str, list[float]] = defaultdict(list)
    calls: dict[str, int] = defaultdict(int)
    acc: dict[str, float] = defaultdict(float)
    with rt.table.wrapped(_timer(rt, acc, calls)), _region_timers(rt, acc, calls):
        for _ in range(steps):
            acc.clear()
            step()
            for slot, seconds in acc.items():
                per_step[slot].append(seconds * 1e6)
    return per_step, dict(calls)


def _nbytes(obj: Any) -> int:
    if isinstance(obj, Tensor):
        return obj.nbytes
    if isinstance(obj, tuple | list):
        return sum(_nbytes(x) for x in obj)
    return 0


def _bytes_per_step(rt: ModelView, step: Callable[[], Any]) -> dict[str, int]:
    """Per slot and region: the bytes one step's calls read and write (every tensor argument, whole,
    and the outputs; a region's weights and live K/V): what it must move at least, whatever its
    kernel. Attention's K/V arguments are the live prefix (the model slices them), so its floor grows
    with the context, not with the static cache."""
    moved: dict[str, int] = defaultdict(int)

    def wrap(slot: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            out = fn(*args)
            moved[slot] += _nbytes(args) + _nbytes(out)
            return out

        return counted

    def region_post(region: str) -> Hook:
        def post(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
            moved[region] += _region_bytes(module, args, kwargs, out)

        return post

    with _on_regions(rt, post_for=region_post, with_kwargs=True), rt.table.wrapped(wrap):
        step()
    return dict(moved)


def _region_bytes(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """A region's floor bytes: its weights once, its activations in and out, and the live K/V prefix
    of every cache inside it (the rows of this batch, kv_len positions)."""
    bound = inspect.signature(type(module).forward).bind(module, *args, **kwargs)
    bound.apply_defaults()
    values = dict(bound.arguments)
    first = next((v for k, v in values.items() if k != "self" and isinstance(v, Tensor)), None)
    batch = int(first.shape[0]) if first is not None else 1
    moved = sum(p.nbytes for p in module.parameters()) + _nbytes(out)
    moved += sum(v.nbytes for k, v in values.items() if k != "self" and isinstance(v, Tensor) and v.is_floating_point())
    for sub in module.modules():
        k_cache = getattr(sub, "k_cache", None)
        if isinstance(k_cache, Tensor):
            kv_len = values.get("kv_len")
            if kv_len is None:  # the whole step: what its forward derives from the positions
                pos = values.get("input_pos")
                kv_len = int(pos.max()) + 1 if isinstance(pos, Tensor) else k_cache.shape[2]
            live = k_cache[:batch, :, : int(kv_len)]
            moved += 2 * live.nbytes  # K and V
    return moved


def copy_bandwidth(device: torch.device) -> float:
    """Bytes per second a device-to-device copy moves (read + write), the best of a few."""
    n = (256 << 20) if device.type == "cuda" else (32 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        _sync_device(device)
        start = time.perf_counter()
        dst.copy_(src)
        _sync_device(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n / best


def profile(rt: ModelView, shapes: list[Shape], steps: int = 5) -> ProfileReport:
    """Per-slot and per-region time per step (sum over its calls) and whole-step time, at each shape.
    Guidance for campaigns (where the time goes), never a verdict: it runs in the live engine."""
    times: list[OpTime] = []
    eager_us: dict[str, float] = {}  # shapes timed through graphs: their eager step, for reference
    shape_steps: list[ShapeStep] = []
    bandwidth = copy_bandwidth(rt.device)
    for shape in shapes:
        with torch.inference_mode(), at_shape(rt, shape) as step:
            step()  # warm-up
            moved = _bytes_per_step(rt, step)
            per_step: dict[str, list[float]] | None = None
            calls: dict[str, int] = {}
            if rt.device.type == "cuda":
                try:
                    per_step, calls = _device_times(rt, step, steps)
                except RuntimeError as exc:
                    rt.progress(f"device-time profile unavailable, timing each call: {exc}")
            if per_step is None:
                per_step, calls = _wall_times(rt, step, steps)
            plain = _step_times(rt, step, steps)
            if rt.graphs is not None:
                # what a step costs in production: one replay of its bucket's CUDA graph
                eager_us[shape.key] = float(np.median(plain)) * 1e6
                tokens = _tokens(rt, shape)
                run = (partial(rt.graphs.prefill.run, tokens) if shape.phase == "prefill"
                       else partial(rt.graphs.step, tokens[:, -1], shape.context - 1))
                run()  # (re)captures the bucket if needed
                plain = _step_times(rt, run, steps)
        for slot, values in per_step.items():
            times.append(OpTime(slot, shape, float(np.median(values)), calls.get(slot, 0) // steps,
                                floor_us=moved.get(slot, 0) / bandwidth * 1e6))
        shape_steps.append(ShapeStep(shape, float(np.median(plain)) * 1e6))
        rt.progress(f"profiled {shape.key}")
    return ProfileReport(tuple(times), tuple(shape_steps), rt.graphs is not None, eager_us, bandwidth / 1e9)
