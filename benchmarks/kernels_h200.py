"""Decode kernels on an H200: the Triton templates against cuBLAS, SDPA, torch.argmax and torch.compile.

    python3 benchmarks/kernels_h200.py --out $OUT --budget-s 420 [--sections env,ops,e2e,e2e8b] [--commit HASH]

Sections (each bounded; <out>/kernels-h200.json is rewritten after every one, so a run cut short keeps
what it measured):
- env: device, versions, device-to-device copy bandwidth (the memory floor's ceiling), bf16 matmul rate.
- ops: every kernel beside its reference at Llama-3.2-1B and 3.1-8B shapes for 1, 4, 16 and 64 rows
  (decode context: 1020 live positions of a 1152-position static cache): a small grid of launch
  variants per shape (what the agents search), each checked against the reference on fresh random
  inputs before it is timed; median of triton.testing.do_bench (the L2 is flushed before every timed
  call); µs, GB/s and the fraction of the copy-bandwidth floor. Variants are compiled first by
  worker processes in parallel (a shared Triton cache), so the timing loop mostly loads kernels.
- e2e / e2e8b: one child process per model (a fresh CUDA context: a fault cannot take the run with
  it): decode tok/s at bs1 and bs64 through the engine's CUDA graphs with (a) the reference slots,
  (b) the best kernels of `ops` installed by hand in the slot table and region table, (c)
  torch.compile(mode="reduce-overhead") of the reference model (last, see issue 15 item 6); greedy
  tokens of (b) against (a); the memory floor.
Imports only torch, triton, numpy and the repository's engine modules (no structlog, nats, grpc).
`--device cpu --smoke` runs the same code under the Triton interpreter on tiny shapes (CI's check of
the script; see tests/triton_kernels).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-kernels-bench-"))  # shared by children
if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    os.environ["TRITON_INTERPRET"] = "1"  # read when each candidate's kernels are decorated

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.sections import SectionedRun  # noqa: E402

PROMPT, MAX_SEQ, GEN = 1020, 1152, 128
MODELS: dict[str, dict[str, int]] = {
    "llama-3.2-1b": dict(E=2048, I=8192, Hq=32, Hkv=8, D=64, V=128256),
    "llama-3.1-8b": dict(E=4096, I=14336, Hq=32, Hkv=8, D=128, V=128256),
}
ROWS = (1, 4, 16, 64)
ANCHORS_BS1 = {"tuned CUDA graphs + PDL": 1258, "Hazy 'No Bubbles' megakernel": 1316}
# launch variants timed per shape (the agents' grids are larger: services/agent_pool/library/triton)
LINEAR_GRID = [dict(BLOCK_N=n, BLOCK_K=k, SPLIT_K=s, NUM_WARPS=w) for n, k, s, w in (
    (16, 512, 1, 4), (16, 512, 2, 4), (16, 512, 4, 4), (16, 256, 4, 4), (16, 1024, 1, 4), (16, 512, 8, 4),
    (8, 1024, 1, 4), (8, 512, 2, 4), (8, 512, 4, 4), (8, 1024, 4, 4), (32, 512, 1, 4), (32, 256, 2, 4),
    (32, 256, 4, 4), (32, 1024, 1, 8), (64, 256, 1, 4), (64, 512, 1, 8), (16, 256, 1, 2), (8, 256, 8, 2))]
LINEAR_GRID += [dict(BLOCK_N=16, BLOCK_K=512, SPLIT_K=1, NUM_STAGES=s) for s in (2, 4)]
LINEAR_GRID_64 = [dict(MAX_M=64, BLOCK_N=n, BLOCK_K=k, SPLIT_K=s, NUM_WARPS=w) for n, k, s, w in (
    (32, 256, 1, 4), (64, 256, 1, 4), (64, 128, 2, 4), (128, 128, 1, 8))]
ATTN_GRID = [dict(BLOCK_N=n, PROGRAMS_PER_SM=p, NUM_WARPS=w) for n, p, w in (
    (64, 2, 4), (64, 1, 4), (64, 4, 4), (32, 2, 4), (32, 4, 2), (128, 2, 4), (128, 1, 8), (64, 8, 4))]
ATTN_GRID += [dict(BLOCK_N=64, SKIP_DEAD=0, NUM_STAGES=s) for s in (2, 3)] + [dict(BLOCK_N=128, SKIP_DEAD=0,
                                                                              NUM_STAGES=3, NUM_WARPS=8)]
ARGMAX_GRID = [dict(BLOCK_V=v, TILES=t, NUM_WARPS=w) for v, t, w in (
    (1024, 2, 4), (1024, 1, 4), (2048, 1, 4), (2048, 2, 8), (4096, 1, 8), (512, 2, 4), (4096, 2, 8), (512, 1, 2))]
NORM_GRID = {"rmsnorm": [dict(NUM_WARPS=w) for w in (2, 4, 8)] + [dict(NUM_WARPS=8, BLOCK_E=1024, NUM_STAGES=2)],
             "add_rmsnorm": [dict(NUM_WARPS=w) for w in (2, 4, 8)],
             "silu_mul": [dict(BLOCK_I=b, NUM_WARPS=w) for b, w in ((1024, 4), (2048, 8), (512, 2), (4096, 8))]}
MLP_GRID = [dict(UP_BLOCK_N=u, UP_SPLIT_K=1, DOWN_BLOCK_N=d, DOWN_SPLIT_K=s) for u, d, s in (
    (16, 16, 4), (8, 16, 4), (16, 8, 2), (32, 16, 2), (16, 16, 1), (8, 8, 4))] + [dict(STACK=1), dict(COUNTERS=0)]
ATTN_BLOCK_GRID = [dict(QKV_BLOCK_N=q, QKV_SPLIT_K=qs, WO_SPLIT_K=ws, PROGRAMS_PER_SM=p) for q, qs, ws, p in (
    (16, 1, 4, 2), (8, 1, 4, 2), (16, 2, 4, 4), (16, 1, 2, 2), (8, 2, 4, 4), (16, 1, 4, 1))] + [dict(COUNTERS=0)]
LAYER_GRID = [dict(), dict(WO_SPLIT_K=2), dict(WO_SPLIT_K=1, DOWN_SPLIT_K=2), dict(PROGRAMS_PER_SM=4),
              dict(SKIP_DEAD=0, ATTN_STAGES=3), dict(QKV_BLOCK_N=16, UP_BLOCK_N=8)]
# the layer at B = 64 (batch decode): MAX_M = 64 and the *_WIDE tensor-core tiles (the narrow tiles above
# stay the bs1 picks; pick_best merges the two)
_WIDE = ("QKV", "WO", "UP", "DOWN")
LAYER_WIDE_GRID = [dict(MAX_M=64, **p) for p in (
    {},
    {f"{g}_WIDE_WARPS": 8 for g in _WIDE},
    {f"{g}_WIDE_BLOCK_N": 16 for g in _WIDE},
    {"QKV_WIDE_BLOCK_K": 256, "WO_WIDE_BLOCK_K": 256, "DOWN_WIDE_BLOCK_K": 256},
    {"QKV_WIDE_BLOCK_N": 64, "QKV_WIDE_SPLIT_K": 2, "WO_WIDE_BLOCK_N": 64, "WO_WIDE_SPLIT_K": 2},
    {"UP_WIDE_BLOCK_N": 32, "DOWN_WIDE_SPLIT_K": 1},
    {"DOWN_WIDE_BLOCK_N": 64, "DOWN_WIDE_SPLIT_K": 4, "UP_WIDE_WARPS": 8},
    {"QKV_WIDE_SPLIT_K": 2, "WO_WIDE_SPLIT_K": 2, "DOWN_WIDE_SPLIT_K": 4},
)]
OP_FAMILIES = ("linear", "attention", "sample", "norms", "regions", "layer")
DEVICE = "cuda"
TOL_SCALE = 1.0  # the CPU interpreter rounds bfloat16 toward zero: wider bounds in --device cpu runs
SMOKE_MODELS = {"llama-tiny": dict(E=256, I=688, Hq=8, Hkv=4, D=32, V=2048)}


# -- bookkeeping ------------------------------------------------------------------------------------
class Run(SectionedRun):
    def __init__(self, out: Path, budget_s: float, smoke: bool, commit: str) -> None:
        self.out, self.smoke = out, smoke
        self.bw = 4.2e12  # replaced by the measured copy bandwidth
        super().__init__(out / "kernels-h200.json", budget_s, {
            "meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "commit": commit,
                     "command": " ".join(["python3", "benchmarks/kernels_h200.py", *sys.argv[1:]]),
                     "prompt_len": PROMPT, "max_seq": MAX_SEQ, "smoke": smoke, "device_kind": DEVICE},
            "env": {}, "ops": {}, "best": {}, "e2e": {},
        })
        self.tmp = Path(tempfile.mkdtemp(prefix="kernels-bench-"))


def _templates() -> Any:
    """The kernel library's render() without importing its package (whose __init__ pulls structlog)."""
    path = REPO / "services" / "agent_pool" / "library" / "triton" / "__init__.py"
    spec = importlib.util.spec_from_file_location("polymorph_triton_templates", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TEMPLATES = _templates()
_LOADED: dict[str, Any] = {}
# one folder for every process: a kernel's Triton cache entry is found by the precompile workers' twin
KERNEL_DIR = Path(os.environ["TRITON_CACHE_DIR"]) / "candidates"


def load(slot: str, params: dict[str, Any]) -> Callable[..., Any]:
    """The candidate's kernel, loaded the way the engine loads one (its own content-addressed file)."""
    from services.engine_host.loader import load_candidate

    source = TEMPLATES.render(slot, {k: str(v) for k, v in params.items()})
    if source not in _LOADED:
        _LOADED[source] = load_candidate(source, slot, KERNEL_DIR).kernel
    return _LOADED[source]


ROTATE_BYTES = 256 << 20  # inputs rotated per timed pass: 4x the 60 MB L2, so weights come from HBM


def copies(nbytes: int, cap: int = 64) -> int:
    """How many input sets to rotate through so one pass over them overflows the L2 (one on the CPU)."""
    if DEVICE == "cpu":
        return 1
    return max(1, min(cap, -(-ROTATE_BYTES // max(nbytes, 1))))


def graph_us(calls: list[Callable[[], Any]], passes: int = 2, reps: int = 5) -> float:
    """µs per call: `calls` (one per rotated input set) captured `passes` times in one CUDA graph, as the
    engine's decode graphs run ops (no CPU launch cost, the graph's own gaps included); the median of
    three timed blocks of `reps` replays. On the CPU: one wall-clock pass."""
    if DEVICE == "cpu":
        t = time.perf_counter()
        for c in calls:
            c()
        return (time.perf_counter() - t) * 1e6 / len(calls)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up outside the capture
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(passes):
            for c in calls:
                c()
    graph.replay()
    torch.cuda.synchronize()
    per = [events_time(graph.replay, reps) for _ in range(3)]
    del graph
    return float(np.median(per)) * 1e6 / (passes * len(calls))


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.shape != want.shape or not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


def rnd(*shape: int, scale: float = 1.0, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE) * scale).to(dtype)


class Plan:
    """Which variants a process handles: all of them and timed (the main process), or a share of them
    run once each (a precompile worker: compiling is the point, into the shared Triton cache)."""

    def __init__(self, part: int = 0, parts: int = 1, timed: bool = True) -> None:
        self.part, self.parts, self.timed, self.count = part, parts, timed, 0

    def mine(self) -> bool:
        self.count += 1
        return (self.count - 1) % self.parts == self.part


def grid_search(run: Run | None, plan: Plan, slot: str, grid: list[dict[str, Any]],
                calls: Callable[[Callable[..., Any]], list[Callable[[], Any]]],
                check: Callable[[Callable[..., Any]], float], tol: float, nbytes: int, ref_us: float | None,
                ) -> dict[str, Any]:
    """Check then time each variant; `calls(kernel)` gives one call per rotated timing input set,
    `check(kernel)` its error on fresh inputs. The row holds every variant and the fastest correct one."""
    rows = []
    for params in grid:
        if not plan.mine():
            continue
        rec: dict[str, Any] = {"params": params}
        try:
            kernel = load(slot, params)
            rec["err"] = err = check(kernel)
            if plan.timed and err <= tol * TOL_SCALE:
                rec["us"] = us = graph_us(calls(kernel))
                rec["gbps"] = nbytes / us / 1e3
                if ref_us:
                    rec["speedup"] = ref_us / us
        except Exception as exc:  # a variant that fails to compile or launch is a result, not a stop
            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(rec)
    timed = [r for r in rows if "us" in r]
    best = min(timed, key=lambda r: r["us"]) if timed else None
    return {"variants": rows, "best": best, "failed": sum(1 for r in rows if "us" not in r and plan.timed)}


def _entry(run: Run | None, key: str, entry: dict[str, Any]) -> None:
    if run is None:
        return
    bw = run.bw
    entry["floor_us"] = entry["bytes"] / bw * 1e6
    best = entry.get("best")
    if best:
        entry["best_frac_floor"] = entry["floor_us"] / best["us"]
    if entry.get("ref_us"):
        entry["ref_frac_floor"] = entry["floor_us"] / entry["ref_us"]
    run.res["ops"].setdefault(key, []).append(entry)
    b = best["us"] if best else float("nan")
    print(f"  {key:12s} {entry['label']:34s} ref {entry.get('ref_us', float('nan')):8.1f} us  best {b:8.1f} us"
          f"  floor {entry['floor_us']:7.1f}  {best['params'] if best else 'none passed'}", flush=True)
    run.save()


# -- ops ----------------------------------------------------------------------------------------------
def op_linear(run: Run | None, plan: Plan, models: dict[str, dict[str, int]]) -> None:
    for name, m in models.items():
        shapes = {"wqkv": ((m["Hq"] + 2 * m["Hkv"]) * m["D"], m["E"]), "wo": (m["E"], m["Hq"] * m["D"]),
                  "w1|w3": (m["I"], m["E"]), "w2": (m["E"], m["I"]), "lm_head": (m["V"], m["E"])}
        for proj, (n, k) in shapes.items():
            ws = [rnd(n, k, scale=k**-0.5) for _ in range(copies(n * k * 2) if plan.timed else 1)]
            w64 = ws[0].double()  # the float64 reference's weight, once per shape
            for rows in ROWS:
                _linear_case(run, plan, f"{name} {proj} {n}x{k} M={rows}", dict(model=name, proj=proj), ws, w64,
                             rows)
            del ws, w64


def _linear_case(run: Run | None, plan: Plan, label: str, tags: dict[str, Any], ws: list[torch.Tensor],
                 w64: torch.Tensor, rows: int) -> None:
    w = ws[0]
    n, k = w.shape
    x = rnd(rows, k)
    ref_us = graph_us([lambda w=w: F.linear(x, w) for w in ws]) if plan.timed else None

    def check(kernel: Callable[..., Any]) -> float:
        x2 = rnd(rows, k)
        return rel_err(kernel(x2, w), x2.double() @ w64.t())

    nbytes = (n * k + rows * (k + n)) * 2
    grid = LINEAR_GRID if rows <= 16 else LINEAR_GRID_64
    entry = grid_search(run, plan, "linear", grid, lambda kern: [lambda w=w: kern(x, w) for w in ws], check, 1e-2,
                        nbytes, ref_us)
    entry.update(tags, N=n, K=k, M=rows, ref_us=ref_us, bytes=nbytes, label=label,
                 ref_err=rel_err(F.linear(x, w), x.double() @ w64.t()))
    _entry(run, "linear", entry)


def _decode_attention_inputs(m: dict[str, int], B: int) -> tuple[torch.Tensor, ...]:
    k = rnd(B, m["Hkv"], MAX_SEQ, m["D"])
    v = rnd(B, m["Hkv"], MAX_SEQ, m["D"])
    q = rnd(B, 1, m["Hq"], m["D"]).transpose(1, 2)
    causal = torch.tril(torch.ones(MAX_SEQ, MAX_SEQ, dtype=torch.bool, device=DEVICE))
    mask = causal[None, None, torch.tensor([PROMPT - 1], device=DEVICE), :]  # 1020 live positions
    return q, k, v, mask


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.size(1) != k.size(1))


def op_attention(run: Run | None, plan: Plan, models: dict[str, dict[str, int]], compiled: bool) -> None:
    for i, (name, m) in enumerate(models.items()):
        for B in ROWS:
            _attention_case(run, plan, name, m, B, compiled and i == 0 and B in (ROWS[0], ROWS[-1]))


def _attention_case(run: Run | None, plan: Plan, name: str, m: dict[str, int], B: int, compiled: bool) -> None:
    kv_bytes = 2 * B * m["Hkv"] * MAX_SEQ * m["D"] * 2
    sets = [_decode_attention_inputs(m, B) for _ in range(copies(kv_bytes) if plan.timed else 1)]
    q, k, v, mask = sets[0]
    extra: dict[str, Any] = {}
    ref_us = None
    if plan.timed:
        ref_us = graph_us([lambda t=t: sdpa(*t) for t in sets])
        extra["sdpa_live_prefix_no_mask_us"] = graph_us([lambda t=t: sdpa(t[0], t[1][:, :, :PROMPT],
                                                                         t[2][:, :, :PROMPT], None) for t in sets])
        if compiled and run is not None and run.left() > 120:
            fn = torch.compile(sdpa, dynamic=False)
            fn(q, k, v, mask)
            extra["compile_us"] = graph_us([lambda t=t: fn(*t) for t in sets])

    def check(kernel: Callable[..., Any]) -> float:
        q2, k2, v2, mask2 = _decode_attention_inputs(m, B)
        return rel_err(kernel(q2, k2, v2, mask2), sdpa(q2.float(), k2.float(), v2.float(), mask2))

    nbytes = (2 * B * m["Hkv"] * PROMPT * m["D"] + 2 * B * m["Hq"] * m["D"]) * 2  # live K/V, q in, out
    entry = grid_search(run, plan, "attention", ATTN_GRID, lambda kern: [lambda t=t: kern(*t) for t in sets], check,
                        1e-2, nbytes, ref_us)
    entry.update(model=name, B=B, ref_us=ref_us, bytes=nbytes, label=f"{name} B={B} T={PROMPT}/{MAX_SEQ}",
                 ref_err=rel_err(sdpa(q, k, v, mask), sdpa(q.float(), k.float(), v.float(), mask)), **extra)
    _entry(run, "attention", entry)


def op_argmax(run: Run | None, plan: Plan, V: int, compiled: bool) -> None:
    for B in ROWS:
        _argmax_case(run, plan, B, V, compiled and B in (ROWS[0], ROWS[-1]))


def _argmax_case(run: Run | None, plan: Plan, B: int, V: int, compiled: bool) -> None:
    sets = [torch.randn(B, V, device=DEVICE) * 4 for _ in range(copies(B * V * 4) if plan.timed else 1)]
    extra: dict[str, Any] = {}
    ref_us = None
    if plan.timed:
        ref_us = graph_us([lambda t=t: torch.argmax(t, dim=-1) for t in sets])
        if compiled and run is not None and run.left() > 120:
            fn = torch.compile(lambda t: torch.argmax(t, dim=-1), dynamic=False)
            fn(sets[0])
            extra["compile_us"] = graph_us([lambda t=t: fn(t) for t in sets])

    def check(kernel: Callable[..., Any]) -> float:
        fresh = torch.randint(0, 200, (B, V), device=DEVICE).float()  # exact ties in every row
        if B > 1:
            fresh[1, V // 3] = float("nan")  # torch.argmax: the first NaN wins
        return 0.0 if torch.equal(kernel(fresh), torch.argmax(fresh, dim=-1)) else float("inf")

    nbytes = B * V * 4 + B * 8
    entry = grid_search(run, plan, "sample", ARGMAX_GRID, lambda kern: [lambda t=t: kern(t) for t in sets], check,
                        0.0, nbytes, ref_us)
    entry.update(B=B, V=V, ref_us=ref_us, bytes=nbytes, label=f"argmax B={B} V={V}", **extra)
    _entry(run, "sample", entry)


def op_norms(run: Run | None, plan: Plan, m: dict[str, int]) -> None:
    for slot in NORM_GRID:
        for rows in (1, 64):
            _norm_case(run, plan, slot, rows, m["I"] if slot == "silu_mul" else m["E"])


def _norm_case(run: Run | None, plan: Plan, slot: str, rows: int, width: int) -> None:
    from services.engine_host.slots import REFERENCES

    w = 1.0 + 0.1 * rnd(width)
    if slot == "rmsnorm":
        args: tuple = (rnd(rows, 1, width), w, 1e-5)
    elif slot == "add_rmsnorm":
        args = (rnd(rows, 1, width), rnd(rows, 1, width), w, 1e-5)
    else:
        args = (rnd(rows, 1, width), rnd(rows, 1, width))
    ref = REFERENCES[slot]
    ref_us = graph_us([lambda: ref(*args)]) if plan.timed else None

    def first(out: Any) -> torch.Tensor:
        return out[0] if isinstance(out, tuple) else out

    def check(kernel: Callable[..., Any]) -> float:
        return rel_err(first(kernel(*args)), first(ref(*args)))

    nbytes = rows * width * 2 * {"rmsnorm": 2, "add_rmsnorm": 4, "silu_mul": 3}[slot]
    entry = grid_search(run, plan, slot, NORM_GRID[slot], lambda kern: [lambda: kern(*args)], check, 1e-2, nbytes,
                        ref_us)
    entry.update(rows=rows, width=width, ref_us=ref_us, bytes=nbytes, label=f"{slot} rows={rows} w={width}")
    _entry(run, slot, entry)


def reference_ops() -> Any:
    """Every slot on its reference, without the engine's table (what the block references run on)."""
    from types import SimpleNamespace

    from services.engine_host.slots import REFERENCES

    return SimpleNamespace(**REFERENCES, attach=lambda model: None)


def layers_of(name: str, n_layers: int, max_batch: int = 16) -> Any:
    """The first layers of a bfloat16 model of the real shapes (seeded weights, random KV caches): the
    blocks a region is timed on, one per rotated input set."""
    from services.engine_host.models.llama import build_model, model_args

    args = model_args(name, n_layers=n_layers, dtype="bfloat16")
    model = build_model(args, reference_ops(), seed=0, device=DEVICE, max_batch=max_batch, max_seq=MAX_SEQ)
    for layer in model.layers:
        layer.attention.kv_cache.k_cache.normal_()
        layer.attention.kv_cache.v_cache.normal_()
    return model


def mapped_region_configs(run: Run, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Region variants that reuse the fastest `linear` tiles found for the same projections at M = 1."""
    best = {e["proj"]: e["best"]["params"] for e in run.res["ops"].get("linear", [])
            if e["model"] == name and e["M"] == 1 and e.get("best")}
    mlp, attn = [], []
    if "w1|w3" in best and "w2" in best:
        up, down = best["w1|w3"], best["w2"]
        mlp.append(dict(UP_BLOCK_N=up["BLOCK_N"], UP_BLOCK_K=up["BLOCK_K"], UP_SPLIT_K=up["SPLIT_K"],
                        DOWN_BLOCK_N=down["BLOCK_N"], DOWN_BLOCK_K=down["BLOCK_K"], DOWN_SPLIT_K=down["SPLIT_K"],
                        NUM_WARPS=up.get("NUM_WARPS", 4)))
    if "wqkv" in best and "wo" in best:
        qkv, wo = best["wqkv"], best["wo"]
        attn.append(dict(QKV_BLOCK_N=qkv["BLOCK_N"], QKV_SPLIT_K=qkv["SPLIT_K"], WO_BLOCK_N=wo["BLOCK_N"],
                         WO_SPLIT_K=wo["SPLIT_K"], BLOCK_K=qkv["BLOCK_K"], GEMV_WARPS=qkv.get("NUM_WARPS", 4)))
    return mlp, attn


def op_regions(run: Run | None, plan: Plan, models: dict[str, dict[str, int]]) -> None:
    for name, m in models.items():
        attn_bytes = (((m["Hq"] + 2 * m["Hkv"]) * m["D"] + m["Hq"] * m["D"]) * m["E"]
                      + 2 * 16 * m["Hkv"] * MAX_SEQ * m["D"]) * 2
        mlp_bytes = 3 * m["I"] * m["E"] * 2
        model = layers_of(name, max(copies(attn_bytes, 16), copies(mlp_bytes, 16)) if plan.timed else 1)
        extra_mlp, extra_attn = mapped_region_configs(run, name) if run is not None else ([], [])
        for B in (1, 4, 16):
            ffs = [layer.feed_forward for layer in model.layers][: copies(mlp_bytes, 16)]
            _mlp_case(run, plan, name, m, ffs, B, extra_mlp)
            _attn_block_case(run, plan, name, m, model, B, extra_attn)
        del model


def _mlp_case(run: Run | None, plan: Plan, name: str, m: dict[str, int], ffs: list[Any], B: int,
              extra: list[dict[str, Any]]) -> None:
    ff = ffs[0]
    x = rnd(B, 1, m["E"])
    ref_us = graph_us([lambda f=f: type(f).forward(f, x) for f in ffs]) if plan.timed else None

    def check(kernel: Callable[..., Any]) -> float:
        x2 = rnd(B, 1, m["E"])
        return rel_err(kernel(ff, x2), type(ff).forward(ff, x2))

    nbytes = (3 * m["I"] * m["E"] + B * 2 * m["E"]) * 2
    entry = grid_search(run, plan, "mlp_block", MLP_GRID + extra, lambda kern: [lambda f=f: kern(f, x) for f in ffs],
                        check, 2e-2, nbytes, ref_us)
    entry.update(model=name, B=B, ref_us=ref_us, bytes=nbytes, label=f"{name} mlp_block B={B}", mapped=extra)
    _entry(run, "mlp_block", entry)


def _attn_block_case(run: Run | None, plan: Plan, name: str, m: dict[str, int], model: Any, B: int,
                     extra: list[dict[str, Any]]) -> None:
    attns = [layer.attention for layer in model.layers]
    attn = attns[0]
    cache = attn.kv_cache
    x = rnd(B, 1, m["E"])
    pos = torch.tensor([PROMPT], device=DEVICE)  # the CUDA-graph call: the whole cache, a causal mask row
    fargs = (model.freqs_cis[pos], model.causal_mask[None, None, pos, :MAX_SEQ], pos, MAX_SEQ)
    ref_us = graph_us([lambda a=a: type(a).forward(a, x, *fargs) for a in attns]) if plan.timed else None

    def check(kernel: Callable[..., Any]) -> float:
        x2 = rnd(B, 1, m["E"])
        got = kernel(attn, x2, *fargs)
        row = cache.k_cache[:B, :, PROMPT].clone()
        want = type(attn).forward(attn, x2, *fargs)
        return max(rel_err(got, want), rel_err(row, cache.k_cache[:B, :, PROMPT]))

    weights = ((m["Hq"] + 2 * m["Hkv"]) * m["D"] + m["Hq"] * m["D"]) * m["E"]
    nbytes = (weights + 2 * B * m["Hkv"] * (PROMPT + 1) * m["D"]) * 2
    entry = grid_search(run, plan, "attn_block", ATTN_BLOCK_GRID + extra,
                        lambda kern: [lambda a=a: kern(a, x, *fargs) for a in attns], check, 2e-2, nbytes, ref_us)
    entry.update(model=name, B=B, ref_us=ref_us, bytes=nbytes, label=f"{name} attn_block B={B}", mapped=extra)
    _entry(run, "attn_block", entry)


def mapped_layer_config(run: Run, name: str) -> list[dict[str, Any]]:
    """The layer region with the four GEMVs of the best attn_block and mlp_block configs (this run's
    picks, or the ones --configs brought)."""
    best = run.res["best"].get(name, {})
    attn, mlp = best.get("attn_block"), best.get("mlp_block")
    if attn is None or mlp is None:
        return []
    cfg = {"QKV_BLOCK_N": attn.get("QKV_BLOCK_N", 16), "QKV_SPLIT_K": attn.get("QKV_SPLIT_K", 1),
           "QKV_BLOCK_K": attn.get("BLOCK_K", 512), "QKV_WARPS": attn.get("GEMV_WARPS", 4),
           "WO_BLOCK_N": attn.get("WO_BLOCK_N", 16), "WO_SPLIT_K": attn.get("WO_SPLIT_K", 4),
           "WO_BLOCK_K": attn.get("BLOCK_K", 512), "WO_WARPS": attn.get("GEMV_WARPS", 4),
           "UP_BLOCK_N": mlp.get("UP_BLOCK_N", 16), "UP_SPLIT_K": mlp.get("UP_SPLIT_K", 1),
           "UP_BLOCK_K": mlp.get("UP_BLOCK_K", 512), "UP_WARPS": mlp.get("NUM_WARPS", 4),
           "DOWN_BLOCK_N": mlp.get("DOWN_BLOCK_N", 16), "DOWN_SPLIT_K": mlp.get("DOWN_SPLIT_K", 4),
           "DOWN_BLOCK_K": mlp.get("DOWN_BLOCK_K", 512), "DOWN_WARPS": mlp.get("NUM_WARPS", 4)}
    for key in ("ATTN_BLOCK_N", "PROGRAMS_PER_SM", "SKIP_DEAD", "ATTN_STAGES", "ATTN_WARPS", "ATTN_SPLITS"):
        if key in attn:
            cfg[key] = attn[key]
    return [cfg, {**cfg, "PROGRAMS_PER_SM": 4}]


def op_layer(run: Run | None, plan: Plan, models: dict[str, dict[str, int]]) -> None:
    for name, m in models.items():
        weights = ((m["Hq"] + 2 * m["Hkv"]) * m["D"] + m["Hq"] * m["D"] + 3 * m["I"]) * m["E"]
        model = layers_of(name, copies((weights + 2 * 16 * m["Hkv"] * MAX_SEQ * m["D"]) * 2, 16) if plan.timed else 1)
        extra = mapped_layer_config(run, name) if run is not None else []
        for B in (1, 4, 16):
            _layer_case(run, plan, name, m, model, B, weights, extra)
        del model
        wide = ROWS[-1]  # a model with caches for 64 rows, fewer copies (its caches are 4x larger)
        cache = 2 * wide * m["Hkv"] * MAX_SEQ * m["D"]
        model = layers_of(name, copies((weights + cache) * 2, 8) if plan.timed else 1, max_batch=wide)
        _layer_case(run, plan, name, m, model, wide, weights, [], LAYER_WIDE_GRID)
        del model


def _layer_case(run: Run | None, plan: Plan, name: str, m: dict[str, int], model: Any, B: int, weights: int,
                extra: list[dict[str, Any]], grid: list[dict[str, Any]] | None = None) -> None:
    blocks = list(model.layers)
    x = rnd(B, 1, m["E"])
    pos = torch.tensor([PROMPT], device=DEVICE)
    fargs = (model.freqs_cis[pos], model.causal_mask[None, None, pos, :MAX_SEQ], pos, MAX_SEQ)
    ref_us = graph_us([lambda b=b: type(b).forward(b, x, *fargs) for b in blocks]) if plan.timed else None

    def check(kernel: Callable[..., Any]) -> float:
        x2 = rnd(B, 1, m["E"])
        return rel_err(kernel(blocks[0], x2, *fargs), type(blocks[0]).forward(blocks[0], x2, *fargs))

    nbytes = (weights + 2 * B * m["Hkv"] * (PROMPT + 1) * m["D"]) * 2
    entry = grid_search(run, plan, "layer", (LAYER_GRID if grid is None else grid) + extra,
                        lambda kern: [lambda b=b: kern(b, x, *fargs) for b in blocks], check, 2e-2, nbytes, ref_us)
    entry.update(model=name, B=B, ref_us=ref_us, bytes=nbytes, label=f"{name} layer B={B}", mapped=extra)
    _entry(run, "layer", entry)


def ops(run: Run | None, plan: Plan, models: dict[str, dict[str, int]], smoke: bool,
        families: tuple[str, ...] = OP_FAMILIES) -> None:
    """Every op family; `run` is None in a precompile worker (nothing recorded)."""
    first = next(iter(models.values()))
    for label, fn in (("linear", lambda: op_linear(run, plan, models)),
                      ("attention", lambda: op_attention(run, plan, models, compiled=not smoke)),
                      ("sample", lambda: op_argmax(run, plan, first["V"], compiled=not smoke)),
                      ("norms", lambda: op_norms(run, plan, first)),
                      ("regions", lambda: op_regions(run, plan, models)),
                      ("layer", lambda: op_layer(run, plan, models))):
        if label not in families:
            continue
        if run is not None and run.left() < 30:
            run.res["errors"][f"ops.{label}"] = f"skipped: {run.left():.0f} s left"
            continue
        try:
            fn()
        except Exception as exc:
            if run is None:
                raise
            run.res["errors"][f"ops.{label}"] = "".join(traceback.format_exception(exc))[-3000:]
            print(run.res["errors"][f"ops.{label}"], flush=True)
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def precompile(run: Run, models: dict[str, dict[str, int]], workers: int, timeout_s: float, families: str) -> None:
    """Compile every fixed-grid variant in `workers` processes at once (the shared Triton cache)."""
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "precompile", "--part", str(i),
                               "--parts", str(workers), "--device", DEVICE, "--ops", families,
                               *(["--smoke"] if run.smoke else [])],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(workers)]
    t = time.perf_counter()
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1.0, timeout_s - (time.perf_counter() - t)))[0][-400:])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append("timeout")
    run.res["env"]["precompile"] = {"workers": workers, "s": round(time.perf_counter() - t, 1),
                                    "rc": [p.returncode for p in procs], "tails": [o for o in outs if o.strip()][:2]}


def pick_best(run: Run) -> dict[str, Any]:
    """The configs e2e installs: per slot/region, the variant with the least total time over the step's shapes."""
    def total(key: str, where: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        score: dict[str, list[float]] = {}
        entries = [e for e in run.res["ops"].get(key, []) if where(e)]
        for e in entries:
            for v in e["variants"]:
                if "us" in v:
                    score.setdefault(json.dumps(v["params"], sort_keys=True), []).append(v["us"])
        full = {p: sum(u) for p, u in score.items() if len(u) == len(entries)}
        return json.loads(min(full, key=full.__getitem__)) if full else None

    best: dict[str, Any] = {}
    for name in MODELS if not run.smoke else SMOKE_MODELS:
        cfg = {
            # bs1 with both regions installed: only the LM head is left to the linear slot
            "linear": total("linear", lambda e, n=name: e["model"] == n and e["proj"] == "lm_head" and e["M"] == 1),
            "attention": total("attention", lambda e, n=name: e["model"] == n and e["B"] == ROWS[-1]),
            "sample": total("sample", lambda e: e["B"] in (1, 64)),
            "mlp_block": total("mlp_block", lambda e, n=name: e["model"] == n and e["B"] == 1),
            "attn_block": total("attn_block", lambda e, n=name: e["model"] == n and e["B"] == 1),
            "layer": total("layer", lambda e, n=name: e["model"] == n and e["B"] == 1),
        }
        for slot in NORM_GRID:
            cfg[slot] = total(slot, lambda e: True)
        wide = wide_layer(run, name)
        if cfg["layer"] is not None and wide is not None:  # bs1's narrow tiles + bs64's wide ones, one kernel
            cfg["layer"] = {**cfg["layer"], **wide}
        best[name] = {**run.res["best"].get(name, {}), **{k: v for k, v in cfg.items() if v is not None}}
    return best


def wide_layer(run: Run, name: str) -> dict[str, Any] | None:
    """MAX_M and the *_WIDE tiles of the fastest B = 64 layer variant, if it beats the block's forward."""
    for e in run.res["ops"].get("layer", []):
        best = e.get("best")
        if e["model"] == name and e["B"] == ROWS[-1] and best and e.get("ref_us") and best["us"] < e["ref_us"]:
            return {k: v for k, v in best["params"].items() if k == "MAX_M" or "_WIDE_" in k}
    return None


# -- e2e (a child process per model) --------------------------------------------------------------------
class Engine:
    """A model with the engine's op tables, whichever API this checkout has: one OpTable (ops.py) for
    slots and regions, or a SlotTable with a RegionTable beside it."""

    REGIONS = ("attn_block", "mlp_block", "layer", "step")

    def __init__(self, name: str) -> None:
        from services.engine_host.models.llama import build_model, model_args

        try:
            from services.engine_host.ops import OpTable

            self.table: Any = OpTable()
            self.regions: Any = None
        except ImportError:
            from services.engine_host.slots import SlotTable

            self.table = SlotTable()
        self.model = build_model(model_args(name), self.table, seed=0, device=DEVICE, max_batch=64, max_seq=MAX_SEQ)
        if not hasattr(self.table, "attach"):
            from services.engine_host.gpu_regions import RegionTable

            self.regions = RegionTable(self.model)

    def swap(self, op: str, fn: Callable[..., Any], cid: str) -> None:
        if self.regions is not None and op in self.REGIONS:
            self.regions.install(op, fn, cid)
        else:
            self.table.swap(op, fn, cid)

    def rollback(self, op: str) -> None:
        if self.regions is not None and op in self.REGIONS:
            self.regions.rollback(op)
        else:
            self.table.rollback(op)

    def graphs(self, buckets: list[int]) -> Any:
        from services.engine_host.cuda_graphs import DecodeGraphs

        if self.regions is None:
            return DecodeGraphs(self.model, self.table, buckets)
        return DecodeGraphs(self.model, self.table, buckets, regions=self.regions)

    def installed(self) -> dict[str, Any]:
        ids = dict(self.table.ids())
        if self.regions is not None:
            ids.update(self.regions.installed)
        return ids


def rebind(model: Any, ops_: Any) -> None:
    for mod in model.modules():
        if hasattr(mod, "slots"):
            mod.slots = ops_


def events_time(fn: Callable[[], Any], reps: int) -> float:
    if DEVICE == "cpu":
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t) / reps
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3 / reps


def time_decode(step: Callable[..., Any], first: torch.Tensor, batch: int, reps: int, blocks: int) -> list[float]:
    tok = first[:batch].clone()
    pos = torch.tensor([PROMPT], device=DEVICE)
    i = [0]

    def one() -> None:
        pos.fill_(PROMPT + i[0] % (GEN - 2))
        i[0] += 1
        step(tok, pos)

    for _ in range(3):
        one()
    return [batch / events_time(one, reps) for _ in range(blocks)]


def step_bytes(model: Any, batch: int, live: int | None = None) -> int:
    """Bytes one decode step must move: weights but the embedding table, the KV cache rows it attends
    (the whole static cache, or `live` positions), the embedding rows in and float32 logits out."""
    a = model.args
    weights = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n != "tok_embeddings")
    kv = batch * a.n_layers * 2 * a.n_kv_heads * (live or model.max_seq) * a.head_dim * 2
    return weights + batch * a.dim * 2 + kv + batch * a.vocab_size * 4


class Follow:
    """Greedy decoding through one set of graphs from the same prefilled cache state every time."""

    def __init__(self, model: Any, first: torch.Tensor, steps: int) -> None:
        self.model, self.first, self.steps = model, first, steps
        self.saved = [(layer.attention.kv_cache.k_cache.clone(), layer.attention.kv_cache.v_cache.clone())
                      for layer in model.layers]

    def restore(self) -> None:
        for layer, (k, v) in zip(self.model.layers, self.saved, strict=True):
            layer.attention.kv_cache.k_cache.copy_(k)
            layer.attention.kv_cache.v_cache.copy_(v)

    def run(self, graphs: Any, bs: int, forced: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [bs, steps] (the first from the shared prefill) and the logits [bs, steps - 1, V] behind
        tokens 1..; `forced`: feed these tokens instead of the engine's own (teacher forcing)."""
        self.restore()
        tok = self.first[:bs].clone()
        tokens, logits = [tok], []
        for t in range(self.steps - 1):
            nxt = graphs.step(forced[:, t] if forced is not None else tok, PROMPT + t).clone()
            logits.append(graphs.logits(bs).clone())
            tokens.append(nxt)
            tok = nxt
        return torch.stack(tokens, dim=1), torch.stack(logits, dim=1)


def agreement(ref: tuple[torch.Tensor, torch.Tensor], free: torch.Tensor,
              forced: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
    """Free-running: decode steps each row agrees before its first mismatch. Teacher-forced (the
    reference's tokens fed to both): the argmax flips per step, and at each flip the reference's own
    top-1 - top-2 logit margin (a flip at a margin far below the logits' rounding noise is a tie)."""
    ref_tokens, ref_logits = ref
    n = ref_tokens.shape[1] - 1
    same = (free[:, 1:] == ref_tokens[:, 1:]).int()
    agreed = torch.where(same.all(dim=1), n, same.argmin(dim=1))
    picks = forced[1].argmax(dim=-1)
    flips = picks != ref_tokens[:, 1:]
    top2 = ref_logits.topk(2, dim=-1).values
    margin = top2[..., 0] - top2[..., 1]
    diff = (forced[1] - ref_logits).abs()
    return {"decode_steps": n, "free_rows_all_agree": float((agreed == n).float().mean()),
            "free_steps_agreed_min": int(agreed.min()), "free_steps_agreed_median": float(agreed.float().median()),
            "forced_flips": int(flips.sum()), "forced_steps": int(flips.numel()),
            "forced_flip_ref_margins": [round(float(v), 4) for v in margin[flips][:20]],
            "ref_margin_median": float(margin.median()), "logit_max_abs_diff": float(diff.max()),
            "logit_mean_abs_diff": float(diff.mean())}


def e2e_child(name: str, configs: dict[str, Any], smoke: bool, bw: float, result: Path,
              compile_baseline: bool = True) -> None:
    """Writes `result` after every stage: a parent that runs out of time keeps what was measured."""
    from services.engine_host.cuda_graphs import prefill

    out: dict[str, Any] = {"configs": configs, "stages_s": {}}

    def save(stage: str) -> None:
        out["stages_s"][stage] = round(time.perf_counter() - t0, 1)
        result.write_text(json.dumps(out, default=str))

    t0 = time.perf_counter()
    eng = Engine(name)
    model = eng.model
    g = torch.Generator(device=DEVICE).manual_seed(1)
    prompt = torch.randint(0, model.args.vocab_size, (64, PROMPT), device=DEVICE, generator=g)
    reps, blocks, steps = (3, 1, 4) if smoke else (50, 4, 17)
    batches = [1, 4] if smoke else [1, 64]
    with torch.inference_mode():
        first = prefill(model, eng.table.sample, prompt)  # once, on the reference: every engine decodes from it
        follow = Follow(model, first, steps)
        save("build_prefill")

        def measure(key: str, graphs: Any, ref: dict[int, tuple[torch.Tensor, torch.Tensor]] | None) -> None:
            for bs in batches:
                if ref is not None:
                    free, _ = follow.run(graphs, bs)
                    forced = follow.run(graphs, bs, forced=ref[bs][0])
                    out[f"bs{bs}.{key}_agreement"] = agreement(ref[bs], free, forced)
                times = time_decode(graphs.step, first, bs, reps, blocks)
                out[f"bs{bs}.{key}_tok_s"] = float(np.median(times))
                out[f"bs{bs}.{key}_spread"] = float(max(times) / min(times) - 1.0)

        # (a) the reference slots through the engine's graphs
        graphs = eng.graphs(batches)
        ref = {bs: follow.run(graphs, bs) for bs in batches}
        measure("reference", graphs, None)
        del graphs
        save("reference")
        # (b) the best kernels of `ops`, installed by hand: slots (timed alone at bs1), + attn/mlp regions,
        # + the layer region
        for slot in ("linear", "attention", "sample", "rmsnorm", "add_rmsnorm", "silu_mul"):
            if slot in configs:
                eng.swap(slot, load(slot, configs[slot]), f"triton:{slot}")
        graphs = eng.graphs([1])
        out["bs1.ours_slots_only_tok_s"] = float(np.median(time_decode(graphs.step, first, 1, reps, blocks)))
        del graphs
        for region in ("mlp_block", "attn_block"):
            if region in configs:
                eng.swap(region, load(region, configs[region]), f"triton:{region}")
        graphs = eng.graphs(batches)
        measure("ours_blocks" if "layer" in configs else "ours", graphs, ref)
        del graphs
        save("ours_blocks")
        if "layer" in configs:
            eng.swap("layer", load("layer", configs["layer"]), "triton:layer")
            graphs = eng.graphs(batches)
            measure("ours", graphs, ref)
            del graphs
            save("ours_layer")
        out["installed"] = eng.installed()
        for bs in batches:
            out[f"bs{bs}.floor_tok_s"] = bs * bw / step_bytes(model, bs)
            out[f"bs{bs}.floor_live_tok_s"] = bs * bw / step_bytes(model, bs, live=PROMPT + GEN // 2)
            out[f"bs{bs}.bytes_per_step"] = step_bytes(model, bs)
        save("ours")
        # (c) torch.compile of the reference model, last (a graph replayed after compiles once faulted)
        for region in ("layer", "mlp_block", "attn_block"):
            if region in configs:
                eng.rollback(region)  # the compiled model is the reference: plain ops below, no regions
        if compile_baseline and not smoke:
            plain = reference_ops()
            rebind(model, plain)

            def step(tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
                return plain.sample(model(tok.view(-1, 1), pos, kv_len=model.max_seq)[:, -1])

            for bs in batches:
                fn = torch.compile(step, mode="reduce-overhead", dynamic=False)
                t = time.perf_counter()
                tok, pos = first[:bs].clone(), torch.tensor([PROMPT], device=DEVICE)
                for _ in range(3):
                    fn(tok, pos)
                torch.cuda.synchronize()
                out[f"bs{bs}.compile_s"] = round(time.perf_counter() - t, 1)
                out[f"bs{bs}.compile_tok_s"] = float(np.median(time_decode(fn, first, bs, reps, blocks)))
                save(f"compile_bs{bs}")


def e2e(run: Run, name: str, compile_baseline: bool = True) -> None:
    cfg_path = run.tmp / f"configs-{name}.json"
    cfg_path.write_text(json.dumps(run.res["best"].get(name, {})))
    res_path = run.tmp / f"e2e-{name}.json"
    cmd = [sys.executable, __file__, "--child", "e2e", "--model", name, "--configs", str(cfg_path),
           "--result", str(res_path), "--bw", repr(run.bw), "--device", DEVICE, *(["--smoke"] if run.smoke else []),
           *([] if compile_baseline else ["--e2e-opts", "no-compile"])]
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=max(30.0, run.left() - 8))
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, err = -9, f"timed out after {exc.timeout:.0f} s (kept the stages it finished)"
    if not res_path.exists():
        raise RuntimeError(f"e2e child for {name} failed ({rc}): {err[-2500:]}")
    out = json.loads(res_path.read_text())
    if rc:
        out["error"] = f"rc {rc}: {err[-2000:]}"
    for bs in (1, 4, 64):
        floor = out.get(f"bs{bs}.floor_tok_s")
        for kind in ("reference", "ours", "ours_blocks", "ours_slots_only", "compile"):
            if floor and f"bs{bs}.{kind}_tok_s" in out:
                out[f"bs{bs}.{kind}_frac_floor"] = out[f"bs{bs}.{kind}_tok_s"] / floor
        # a layer region with MAX_M below bs runs the blocks path at bs: one config gives either, so the
        # better of the two is what the kernels reach at this batch
        sets = {k: out[f"bs{bs}.{k}_tok_s"] for k in ("ours", "ours_blocks") if f"bs{bs}.{k}_tok_s" in out}
        if sets:
            out[f"bs{bs}.ours_best_set"] = best_set = max(sets, key=sets.__getitem__)
            out[f"bs{bs}.ours_best_tok_s"] = sets[best_set]
        if f"bs{bs}.compile_tok_s" in out and f"bs{bs}.ours_tok_s" in out:
            out[f"bs{bs}.ours_vs_compile"] = out[f"bs{bs}.ours_tok_s"] / out[f"bs{bs}.compile_tok_s"]
            out[f"bs{bs}.ours_best_vs_compile"] = out[f"bs{bs}.ours_best_tok_s"] / out[f"bs{bs}.compile_tok_s"]
    run.res["e2e"][name] = out


# -- env and the table ------------------------------------------------------------------------------------
def env(run: Run) -> None:
    import triton

    meta = run.res["env"]
    meta.update(torch=torch.__version__, triton=triton.__version__, numpy=np.__version__)
    if DEVICE == "cpu":
        meta["device"] = "cpu (Triton interpreter)"
        return
    p = torch.cuda.get_device_properties(0)
    meta.update(device=torch.cuda.get_device_name(0), sms=p.multi_processor_count, cuda=torch.version.cuda,
                memory_gib=round(p.total_memory / 2**30, 1))
    n = 1 << 30  # 2 GiB of bf16, far past the 60 MB L2
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    times = [events_time(lambda: y.copy_(x), 5) for _ in range(5)]
    run.bw = 2 * n * 2 / float(np.median(times))
    meta["copy_bw_GBps"] = round(run.bw / 1e9, 1)
    a, b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16), torch.randn(8192, 8192, device="cuda",
                                                                                      dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    meta["bf16_matmul_TFLOPs"] = round(2 * 8192**3 / events_time(lambda: a @ b, 10) / 1e12, 1)


def table(run: Run) -> None:
    print("\n# kernels: reference vs best variant (µs; fraction of the copy-bandwidth floor)")
    for key, entries in run.res["ops"].items():
        for e in entries:
            b = e.get("best") or {}
            ref = e.get("ref_us") or float("nan")
            print(f"{key:11s} {e['label']:38s} ref {ref:8.1f}  ours {b.get('us', float('nan')):8.1f}  "
                  f"x{ref / b['us'] if b else float('nan'):5.2f}  floor {e.get('best_frac_floor', 0):4.2f}")
    for name, out in run.res["e2e"].items():
        for bs in (1, 4, 64):
            if f"bs{bs}.reference_tok_s" not in out:
                continue
            cells = [f"{k} {out.get(f'bs{bs}.{k}_tok_s', float('nan')):9.1f}" for k in ("reference", "ours", "compile",
                                                                                        "floor")]
            ag = out.get(f"bs{bs}.ours_agreement", {})
            print(f"e2e {name} bs{bs}: " + "  ".join(cells) + f"  free-running agree {ag.get('free_rows_all_agree')}"
                  f"  forced flips {ag.get('forced_flips')}/{ag.get('forced_steps')}")


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else format(v, spec)


def _params(p: dict[str, Any] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (p or {}).items()) or "defaults"


def render(res: dict[str, Any]) -> str:
    """Markdown tables of a results file (BENCHMARKS.md's kernels-h200 section is built from these)."""
    ops_, lines = res["ops"], []

    def best(e: dict[str, Any]) -> dict[str, Any]:
        return e.get("best") or {}

    def row(cells: list[str]) -> None:
        lines.append("| " + " | ".join(cells) + " |")

    lines += ["**linear** (x [M, K] @ W^T; reference F.linear = cuBLAS)", "",
              "| model | projection | N x K | M | cuBLAS µs | ours µs | speedup | ours / floor | best config |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in ops_.get("linear", []):
        b = best(e)
        row([e["model"], e["proj"], f"{e['N']}x{e['K']}", str(e["M"]), _fmt(e.get("ref_us")), _fmt(b.get("us")),
             _fmt(b.get("speedup"), ".2f"), _fmt(e.get("best_frac_floor"), ".2f"), _params(b.get("params"))])
    lines += ["", "**attention** (decode, 1020 live positions of a 1152-position static cache, GQA 32/8)", "",
              "| model | B | SDPA, mask over the cache µs | SDPA, live prefix, no mask µs | torch.compile µs | ours µs "
              "| vs SDPA (mask) | ours / floor | best config |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in ops_.get("attention", []):
        b = best(e)
        row([e["model"], str(e["B"]), _fmt(e.get("ref_us")), _fmt(e.get("sdpa_live_prefix_no_mask_us")),
             _fmt(e.get("compile_us")), _fmt(b.get("us")), _fmt(b.get("speedup"), ".2f"),
             _fmt(e.get("best_frac_floor"), ".2f"), _params(b.get("params"))])
    lines += ["", "**sample** (argmax over float32 logits [B, 128256])", "",
              "| B | torch.argmax µs | torch.compile µs | ours µs | speedup | ours / floor | best config |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for e in ops_.get("sample", []):
        b = best(e)
        row([str(e["B"]), _fmt(e.get("ref_us")), _fmt(e.get("compile_us")), _fmt(b.get("us")),
             _fmt(b.get("speedup"), ".2f"), _fmt(e.get("best_frac_floor"), ".2f"), _params(b.get("params"))])
    lines += ["", "**regions** (reference: the module's own forward on the reference slots)", "",
              "| region | model | B | reference µs | ours µs | speedup | ours / floor | best config |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in ("attn_block", "mlp_block"):
        for e in ops_.get(key, []):
            b = best(e)
            row([key, e["model"], str(e["B"]), _fmt(e.get("ref_us")), _fmt(b.get("us")),
                 _fmt(b.get("speedup"), ".2f"), _fmt(e.get("best_frac_floor"), ".2f"), _params(b.get("params"))])
    norms = [(k, e) for k in NORM_GRID for e in ops_.get(k, [])]
    if norms:
        lines += ["", "**norms** (the existing templates, picked for the e2e set)", "",
                  "| op | rows | width | reference µs | ours µs | best config |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for k, e in norms:
            b = best(e)
            row([k, str(e["rows"]), str(e["width"]), _fmt(e.get("ref_us")), _fmt(b.get("us")),
                 _params(b.get("params"))])
    lines += ["", "**end to end** (decode tok/s through the engine's CUDA graphs; fraction of the floor in brackets)",
              "", "| model | batch | reference slots | ours | ours without the layer region | ours, slots only "
              "| torch.compile reduce-overhead | floor | ours / compile |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    agree_rows = []
    for name, out in res.get("e2e", {}).items():
        for bs in (1, 4, 64):
            if f"bs{bs}.reference_tok_s" not in out:
                continue

            def cell(kind: str, out: dict[str, Any] = out, bs: int = bs) -> str:
                v, f = out.get(f"bs{bs}.{kind}_tok_s"), out.get(f"bs{bs}.{kind}_frac_floor")
                return "-" if v is None else f"{v:,.0f} ({f:.2f})" if f is not None else f"{v:,.0f}"

            row([name, str(bs), cell("reference"), cell("ours"), cell("ours_blocks"), cell("ours_slots_only"),
                 cell("compile"), _fmt(out.get(f"bs{bs}.floor_tok_s"), ",.0f"),
                 _fmt(out.get(f"bs{bs}.ours_vs_compile"), ".2f")])
            for kind in ("ours", "ours_blocks"):
                ag = out.get(f"bs{bs}.{kind}_agreement")
                if ag:
                    agree_rows.append([name, str(bs), kind, f"{ag['free_rows_all_agree']:.0%}",
                                       str(ag["free_steps_agreed_min"]), f"{ag['forced_flips']} / {ag['forced_steps']}",
                                       ", ".join(f"{m:.3f}" for m in ag["forced_flip_ref_margins"][:6]) or "-",
                                       f"{ag['ref_margin_median']:.2f}", f"{ag['logit_max_abs_diff']:.3f}"])
    if agree_rows:
        lines += ["", "**greedy agreement with the reference engine** (both decode from one reference prefill; "
                  "16 decode steps)", "", "| model | batch | set | rows agreeing all 16 steps (free-running) "
                  "| fewest steps before a mismatch | argmax flips, teacher-forced | reference top-1 - top-2 margin "
                  "at the flips | median margin | max abs logit difference |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in agree_rows:
            row(r)
    return "\n".join(lines)


def main() -> None:
    global DEVICE, MODELS, ROWS, PROMPT, MAX_SEQ, GEN, TOL_SCALE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--sections", default="env,ops,e2e,e2e8b")
    ap.add_argument("--commit", default="")
    ap.add_argument("--configs", type=Path, help="an earlier run's JSON: its best configs, updated by this run's ops")
    ap.add_argument("--ops", default=",".join(OP_FAMILIES), help="op families the ops section runs")
    ap.add_argument("--no-compile", action="store_true", help="e2e without the torch.compile baseline")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and few repetitions")
    ap.add_argument("--workers", type=int, default=8, help="precompile processes (0: none)")
    ap.add_argument("--render", type=Path, help="print the Markdown tables of a results JSON and exit")
    for hidden in ("--child", "--model", "--result", "--part", "--parts", "--bw", "--e2e-opts"):
        ap.add_argument(hidden, default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.render:
        print(render(json.loads(a.render.read_text())))
        return
    DEVICE = a.device
    TOL_SCALE = 3.0 if DEVICE == "cpu" else 1.0
    if a.smoke:
        MODELS, ROWS, PROMPT, MAX_SEQ, GEN = SMOKE_MODELS, (1, 3), 40, 64, 16
    if a.child == "precompile":
        ops(None, Plan(int(a.part), int(a.parts), timed=False), MODELS, a.smoke, tuple(a.ops.split(",")))
        return
    if a.child == "e2e":
        e2e_child(a.model, json.loads(Path(a.configs).read_text()), a.smoke, float(a.bw), Path(a.result),
                  compile_baseline=a.e2e_opts != "no-compile")
        return
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU (or --device cpu --smoke)")
    a.out.mkdir(parents=True, exist_ok=True)
    run = Run(a.out, a.budget_s, a.smoke, a.commit)
    sections, families = a.sections.split(","), tuple(a.ops.split(","))
    run.res["meta"]["no_compile"] = a.no_compile
    if a.configs:  # an earlier run's picks; this run's ops replace the families it measures
        earlier = json.loads(a.configs.read_text())
        run.res["best"] = earlier["best"]
        run.res["meta"]["configs_from"] = {"commit": earlier["meta"].get("commit"), "date": earlier["meta"].get("date")}
    if "env" in sections:
        run.section("env", lambda: env(run), 5)
    if "ops" in sections:
        if a.workers > 0:
            run.section("precompile", lambda: precompile(run, MODELS, a.workers, min(150.0, run.left() / 3),
                                                         a.ops), 60)
        run.section("ops", lambda: ops(run, Plan(), MODELS, a.smoke, families), 60)
    if run.res["ops"]:
        run.res["best"] = pick_best(run)
    run.save()
    names = list(MODELS)
    if "e2e" in sections:
        run.section("e2e", lambda: e2e(run, names[0], not a.no_compile), 60)
    if "e2e8b" in sections and len(names) > 1:
        run.section("e2e8b", lambda: e2e(run, names[1], not a.no_compile), 150 if not a.no_compile else 50)
    run.save()
    table(run)


if __name__ == "__main__":
    main()
