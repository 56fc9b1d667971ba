"""Every Triton variant of rmsnorm, add_rmsnorm and silu_mul against eager torch and torch.compile, on a GPU.

For each op, Llama shape and row count: check each variant against the plain torch reference, then
time it with triton.testing.do_bench (median of many runs, L2 cleared before each run) next to the
eager reference and torch.compile of the same reference. Prints a table of the best variant per shape
and writes every number to --out as JSON.

    python3 benchmarks/triton_kernels_gpu.py --out benchmarks/results/triton-kernels-h200.json

The full grid (75 variants x 6 shapes, plus torch.compile of each reference) takes several minutes,
mostly Triton and Inductor compiles; --ops and --max-variants split or shrink it, and the JSON is
rewritten after every shape so a run cut short keeps what it measured ("complete": false).

Each variant is loaded the way the engine host loads a candidate: its source written to its own file
and imported from there. Needs a CUDA GPU; --help works anywhere.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.testing

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere: the variant grid lives in the repo
    sys.path.insert(0, str(REPO))

MODELS = {"llama-3.2-1b": {"E": 2048, "I": 8192}, "llama-3.1-8b": {"E": 4096, "I": 14336}}
OPS = ("rmsnorm", "add_rmsnorm", "silu_mul")
EPS = 1e-5
DEVICE = "cuda"  # tests/triton_kernels runs this script's logic on the CPU under the interpreter
TOL = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-5}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    p.add_argument("--rows", default="1,64,4096", help="row counts (batch x tokens) to run, comma-separated")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(TOL))
    p.add_argument("--max-variants", type=int, default=0, help="per op, spread over the grid (0: all)")
    p.add_argument("--warmup-ms", type=int, default=10, help="do_bench warm-up time per measurement")
    p.add_argument("--rep-ms", type=int, default=40, help="do_bench measuring time per measurement")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument("--verbose", action="store_true", help="print every variant, not only the best per shape")
    return p.parse_args(argv)


# --- references (plain torch, the way gpt-fast calls them) ---
def ref_rmsnorm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def ref_add_rmsnorm(x, residual, weight, eps):
    h = x + residual
    return ref_rmsnorm(h, weight, eps), h


def ref_silu_mul(gate, up):
    return torch.nn.functional.silu(gate) * up


REFERENCES: dict[str, Callable[..., Any]] = {
    "rmsnorm": ref_rmsnorm, "add_rmsnorm": ref_add_rmsnorm, "silu_mul": ref_silu_mul,
}


def make_inputs(op: str, rows: int, model: str, dtype) -> tuple[tuple, int, int]:
    """(args, width, bytes moved per call by an ideal fused kernel)."""
    size = torch.finfo(dtype).bits // 8
    g = torch.Generator(device=DEVICE).manual_seed(rows * 7 + len(model))
    rnd = lambda *shape: torch.randn(*shape, device=DEVICE, dtype=dtype, generator=g)  # noqa: E731
    if op == "silu_mul":
        width = MODELS[model]["I"]
        return (rnd(rows, width), rnd(rows, width)), width, 3 * rows * width * size
    width = MODELS[model]["E"]
    weight = 1.0 + 0.1 * rnd(width)
    if op == "rmsnorm":
        return (rnd(rows, width), weight, EPS), width, (2 * rows + 1) * width * size
    return (rnd(rows, width), rnd(rows, width), weight, EPS), width, (4 * rows + 1) * width * size



def _as_tuple(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def max_error(got, want) -> float:
    pairs = zip(_as_tuple(got), _as_tuple(want), strict=True)
    return max(float((g.float() - w.float()).abs().max()) for g, w in pairs)


def allclose(got, want, tol: float) -> bool:
    return all(
        g.shape == w.shape and g.dtype == w.dtype and bool(torch.isfinite(g).all())
        and torch.allclose(g.float(), w.float(), atol=tol, rtol=tol)
        for g, w in zip(_as_tuple(got), _as_tuple(want), strict=True)
    )


def bench_us(fn: Callable[[], Any], args: argparse.Namespace) -> tuple[float, float, float]:
    """(median, p20, p80) in microseconds: do_bench clears the L2 before every timed call."""
    q = triton.testing.do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, quantiles=[0.5, 0.2, 0.8])
    return q[0] * 1e3, q[1] * 1e3, q[2] * 1e3


def spread(grid: list, n: int) -> list:
    if n <= 0 or n >= len(grid):
        return grid
    step = len(grid) / n
    return [grid[int(i * step)] for i in range(n)]


def run_shape(op, model, rows, variants, compiled, args, dtype) -> dict[str, Any]:
    inputs, width, nbytes = make_inputs(op, rows, model, dtype)
    ref = REFERENCES[op]
    want = ref(*inputs)
    snapshot = [t.clone() for t in inputs if hasattr(t, "clone")]
    entry: dict[str, Any] = {"op": op, "model": model, "rows": rows, "width": width, "bytes": nbytes}
    med, lo, hi = bench_us(lambda: ref(*inputs), args)
    entry["eager"] = {"us": med, "p20_us": lo, "p80_us": hi, "gbps": nbytes / med / 1e3}
    if compiled is not None:
        try:
            t0 = time.perf_counter()
            got = compiled(*inputs)
            compile_s = time.perf_counter() - t0
            med, lo, hi = bench_us(lambda: compiled(*inputs), args)
            entry["compile"] = {"us": med, "p20_us": lo, "p80_us": hi, "gbps": nbytes / med / 1e3,
                                "first_call_s": compile_s, "max_abs_err": max_error(got, want)}
        except Exception as e:  # a compile failure is a result to report, not a reason to stop
            entry["compile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    rows_out = []
    for v in variants:
        rec: dict[str, Any] = {"candidate_id": v["candidate_id"], "params": v["params"]}
        if "error" in v:
            rec["error"] = v["error"]
            rows_out.append(rec)
            continue
        mod = v["module"]
        try:
            t0 = time.perf_counter()
            got = mod.kernel(*inputs)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            rec["first_call_s"] = time.perf_counter() - t0  # Triton JIT for this specialisation included
            rec["max_abs_err"] = max_error(got, want)
            rec["ok"] = allclose(got, want, TOL[args.dtype])
            untouched = all(torch.equal(a, b) for a, b in zip(
                [t for t in inputs if hasattr(t, "clone")], snapshot, strict=True))
            rec["inputs_untouched"] = untouched
            rec["ok"] = rec["ok"] and untouched
            if rec["ok"]:
                med, lo, hi = bench_us(lambda mod=mod: mod.kernel(*inputs), args)
                rec.update(us=med, p20_us=lo, p80_us=hi, gbps=nbytes / med / 1e3,
                           speedup_vs_eager=entry["eager"]["us"] / med)
                if "us" in entry.get("compile", {}):
                    rec["speedup_vs_compile"] = entry["compile"]["us"] / med
        except Exception as e:
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {e}"[:500]
        rows_out.append(rec)
    entry["variants"] = rows_out
    timed = [r for r in rows_out if r.get("ok") and "us" in r]
    entry["best"] = min(timed, key=lambda r: r["us"]) if timed else None
    entry["n_ok"] = len(timed)
    entry["n_failed"] = sum(1 for r in rows_out if not r.get("ok"))
    return entry


def load_variants(op: str, args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    from services.agent_pool.library.triton import candidates
    from services.engine_host.loader import candidate_id, load_candidate

    out = []
    for slot, source, params in spread(candidates((op,)), args.max_variants):
        v: dict[str, Any] = {"params": params, "candidate_id": candidate_id(slot, source)}
        try:
            v["module"] = load_candidate(source, slot, directory)  # the engine's own loader
        except Exception as e:
            v["error"] = f"load: {type(e).__name__}: {e}"[:500]
        out.append(v)
    return out


def fmt_params(params: dict[str, str]) -> str:
    short = {"NUM_WARPS": "w", "ROWS_PER_PROGRAM": "r", "BLOCK_E": "be", "BLOCK_I": "bi", "NUM_STAGES": "s"}
    return " ".join(f"{short.get(k, k)}={v}" for k, v in params.items())


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(results: list[dict[str, Any]], verbose: bool) -> None:
    head = (f"{'op':<12} {'model':<13} {'rows':>5} {'eager us':>9} {'compile us':>10} {'best us':>8} "
            f"{'GB/s':>6} {'x eager':>7} {'x compile':>9} {'ok/all':>7}  best variant")
    print(head)
    print("-" * len(head))
    for e in results:
        b = e["best"] or {}
        cells = [
            f"{e['op']:<12}", f"{e['model']:<13}", f"{e['rows']:>5}", f"{_num(e['eager']['us'], '.2f'):>9}",
            f"{_num(e.get('compile', {}).get('us'), '.2f'):>10}", f"{_num(b.get('us'), '.2f'):>8}",
            f"{_num(b.get('gbps'), '.0f'):>6}", f"{_num(b.get('speedup_vs_eager'), '.2f'):>7}",
            f"{_num(b.get('speedup_vs_compile'), '.2f'):>9}", f"{e['n_ok']:>3}/{len(e['variants']):<3}",
        ]
        print(" ".join(cells) + "  " + (fmt_params(b["params"]) if b else "none passed"))
        if verbose:
            for r in sorted(e["variants"], key=lambda r: r.get("us", float("inf"))):
                if "us" in r:
                    status = f"{r['us']:9.2f} us {r['gbps']:6.0f} GB/s"
                else:
                    status = f"FAILED err={r.get('max_abs_err')} {r.get('error', '')[:80]}"
                print(f"{'':<32} {status}  {fmt_params(r['params'])}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one (the CPU path is tests/triton_kernels)", file=sys.stderr)
        return 2
    # one static compile per shape: let dynamo keep them all instead of falling back to eager
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    dtype = getattr(torch, args.dtype)
    ops = [o for o in args.ops.split(",") if o]
    models = [m for m in args.models.split(",") if m]
    rows_list = [int(r) for r in args.rows.split(",") if r]
    unknown = sorted(set(ops) - set(OPS)) + sorted(set(models) - set(MODELS))
    if unknown:
        print(f"unknown ops or models: {unknown}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    props = torch.cuda.get_device_properties(0)
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": props.name, "sm_count": props.multi_processor_count,
        "torch": torch.__version__, "triton": triton.__version__, "dtype": args.dtype,
        "timing": {"tool": "triton.testing.do_bench", "stat": "median, p20, p80", "l2_cleared": True,
                   "warmup_ms": args.warmup_ms, "rep_ms": args.rep_ms},
        "complete": False, "wall_s": 0.0, "results": [],
    }
    results: list[dict[str, Any]] = report["results"]
    with tempfile.TemporaryDirectory(prefix="polymorph-triton-") as tmp:
        for op in ops:
            variants = load_variants(op, args, Path(tmp))
            compiled = None if args.no_compile else torch.compile(REFERENCES[op], dynamic=False)
            for model in models:
                for rows in rows_list:
                    entry = run_shape(op, model, rows, variants, compiled, args, dtype)
                    results.append(entry)
                    best = f"best {entry['best']['us']:.2f} us" if entry["best"] else "none passed"
                    ok, bad = entry["n_ok"], entry["n_failed"]
                    print(f"# {op} {model} rows={rows}: {ok} ok, {bad} failed, {best}", flush=True)
                    # written after every shape: a run cut short by a time limit keeps what it measured
                    report["wall_s"] = time.perf_counter() - started
                    _write(args.out, report)
    report["complete"] = True
    _write(args.out, report)
    print()
    print_table(results, args.verbose)
    print(f"\nwrote {args.out} ({len(results)} shapes, {report['wall_s']:.0f} s)")
    failed = sum(e["n_failed"] for e in results)
    return 1 if failed else 0


def _write(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
