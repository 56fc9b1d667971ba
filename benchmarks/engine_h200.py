"""The engine host on an H200: cold start vs hot swap, experiments per hour, decode tok/s, tiers, faults.

    python3 benchmarks/engine_h200.py --out /tmp/out [--smoke] [--budget-s 540]

Writes <out>/engine-h200.json after every section (a run cut short keeps what it measured) and prints
a short table last. Sections, in order: device ceilings (copy bandwidth); the fast tier as the host
runs it (a spawned worker, Tier restarts) with a stream of Triton rmsnorm candidates and a candidate
that faults the device; llama-3.1-8b and llama-3.2-1b decode (eager slots, CUDA graphs, the same
model without the slot table, torch.compile reduce-overhead last) with a hot swap into the running
8B engine; the slow tier (whole 1B model, slot inputs captured from trace-shaped prompts) for the
tier rank correlation; a region swap; cold starts in fresh processes. Needs a CUDA GPU.

Prompt lengths come from benchmarks/traffic_profile.json (quantiles of ../shared/traces, which the
device machine does not have).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-engine-bench-"))  # cold JIT

import numpy as np  # noqa: E402
import torch  # noqa: E402

from services.engine_host.cuda_graphs import DecodeGraphs, prefill  # noqa: E402
from services.engine_host.gpu_faults import faulting_triton_rmsnorm  # noqa: E402
from services.engine_host.gpu_regions import RegionTable  # noqa: E402
from services.engine_host.loader import candidate_id, load_candidate  # noqa: E402
from services.engine_host.models.llama import build_model, model_args  # noqa: E402
from services.engine_host.slots import REFERENCES, SlotTable  # noqa: E402

PROFILE = json.loads((REPO / "benchmarks" / "traffic_profile.json").read_text())
PROMPT = int(PROFILE["conv"]["prompt_quantiles"]["0.5"])  # median chat prompt (1020 tokens)
GEN = 128
MAX_SEQ = PROMPT + GEN + 4
SLOT = "rmsnorm"


class Bench:
    def __init__(self, out: Path, smoke: bool, budget_s: float) -> None:
        self.out, self.smoke = out, smoke
        self.began = time.perf_counter()
        self.deadline = self.began + budget_s
        self.res: dict[str, Any] = {
            "meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "smoke": smoke,
                     "command": " ".join(sys.argv), "prompt_len": PROMPT, "max_seq": MAX_SEQ},
            "metrics": {}, "errors": {}, "sections_s": {},
        }
        self.tmp = Path(tempfile.mkdtemp(prefix="engine-bench-"))
        self.models: dict[str, Any] = {}
        self.tiers: dict[str, Any] = {}
        self.bw = 4.3e12  # replaced by the measured copy bandwidth

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def m(self, key: str, value: Any) -> None:
        self.res["metrics"][key] = value

    def save(self) -> None:
        self.res["meta"]["elapsed_s"] = round(time.perf_counter() - self.began, 1)
        (self.out / "engine-h200.json").write_text(json.dumps(self.res, indent=1, default=str))

    def section(self, name: str, fn: Any, need_s: float) -> None:
        if self.left() < need_s:
            self.res["errors"][name] = f"skipped: {self.left():.0f} s left, needs ~{need_s:.0f}"
            print(f"## {name}: skipped", flush=True)
            self.save()
            return
        print(f"## {name} ({self.left():.0f} s left)", flush=True)
        t = time.perf_counter()
        try:
            fn()
        except Exception as exc:
            self.res["errors"][name] = "".join(traceback.format_exception(exc))[-2000:]
            print(self.res["errors"][name], flush=True)
        self.res["sections_s"][name] = round(time.perf_counter() - t, 1)
        self.save()


# -- helpers ------------------------------------------------------------------------------------
def events_time(fn: Any, reps: int) -> float:
    """Seconds per call: CUDA events around `reps` calls (warm-up is the caller's job)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3 / reps


def rmsnorm_variants(n: int) -> list[str]:
    from services.agent_pool.library.triton import render

    out = []
    for block in (0, 512, 1024, 2048):
        for rows in (1, 2, 4):
            for warps in (1, 2, 4, 8, 16):
                out.append(render(SLOT, {"NUM_WARPS": str(warps), "ROWS_PER_PROGRAM": str(rows),
                                         "BLOCK_E": str(block), "NUM_STAGES": "2"}))
    # spread the pick over the grid so a short run still sees different shapes of variant
    step = max(1, len(out) // n)
    return (out[::step] + [s for i, s in enumerate(out) if i % step])[:n]


def traffic_shapes(seed: int = 0) -> list[tuple[str, int, int, float]]:
    """Four ShapeBuckets drawn from the trace quantiles: prompt lengths by inverse CDF (conv and code
    mixed by request count), decode at batch 1 and 64 (the batch mix), capped by the static cache."""
    rng = np.random.default_rng(seed)
    kinds = [k for k in ("conv", "code") if k in PROFILE]
    p = np.array([PROFILE[k]["requests"] for k in kinds], dtype=float)

    def draw() -> int:
        qs = PROFILE[kinds[int(rng.choice(len(kinds), p=p / p.sum()))]]["prompt_quantiles"]
        xs = sorted(float(q) for q in qs)
        return int(np.interp(rng.uniform(xs[0], xs[-1]), xs, [qs[k] for k in sorted(qs, key=float)]))

    cap = MAX_SEQ - 8
    prompts = sorted(min(draw(), cap) for _ in range(2))
    return [("decode", 1, min(draw(), cap), 0.35), ("decode", 64, min(draw(), cap), 0.35),
            ("prefill", 1, prompts[0], 0.15), ("prefill", 1, prompts[1], 0.15)]


def rank_candidates() -> list[tuple[str, str]]:
    """>= 10 rmsnorm candidates that genuinely differ: Triton launch configs from poor (one warp, tiny
    chunks, a register-spilling 16-row tile) to good, torch library variants, and the reference."""
    from services.agent_pool.library import reference_source
    from services.agent_pool.library.norm import RMSNORM
    from services.agent_pool.library.triton import render

    out = [("reference", reference_source(SLOT))]
    for warps, rows, block in ((4, 1, 0), (16, 1, 0), (1, 1, 64), (1, 16, 0), (1, 32, 64), (2, 8, 128)):
        out.append((f"triton w{warps} r{rows} b{block}", render(SLOT, {
            "NUM_WARPS": str(warps), "ROWS_PER_PROGRAM": str(rows), "BLOCK_E": str(block), "NUM_STAGES": "2"})))
    for params in ({"form": "functional"}, {"acc": "native"}, {"form": "einsum", "scale": "div_sqrt", "out": "inplace"},
                   {"form": "vector_norm", "weight": "fused"}):
        out.append(("torch " + " ".join(f"{k}={v}" for k, v in params.items()), RMSNORM.render(params)))
    # deliberately poor: float64 arithmetic, two extra casts over the whole tensor
    out.append(("torch float64 (deliberately poor)", reference_source(SLOT).replace("torch.float32", "torch.float64")
                .replace(".float()", ".double()")))
    return out


class PlainOps:
    """The same reference functions without the slot table: what 'no slot table' means below."""

    rmsnorm = staticmethod(REFERENCES["rmsnorm"])
    add_rmsnorm = staticmethod(REFERENCES["add_rmsnorm"])
    rope = staticmethod(REFERENCES["rope"])
    attention = staticmethod(REFERENCES["attention"])
    silu_mul = staticmethod(REFERENCES["silu_mul"])
    linear = staticmethod(REFERENCES["linear"])
    sample = staticmethod(REFERENCES["sample"])


def rebind(model: Any, ops: Any) -> None:
    for mod in model.modules():
        if hasattr(mod, "slots"):
            mod.slots = ops


def step_bytes(model: Any, batch: int) -> int:
    a = model.args
    weights = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n != "tok_embeddings")
    kv = batch * a.n_layers * 2 * a.n_kv_heads * model.max_seq * a.head_dim * 2
    return weights + batch * a.dim * 2 + kv + batch * a.vocab_size * 4  # + embedding rows, logits


# -- sections -----------------------------------------------------------------------------------
def env(b: Bench) -> None:
    import triton

    p = torch.cuda.get_device_properties(0)
    b.res["meta"].update(device=torch.cuda.get_device_name(0), sms=p.multi_processor_count,
                         torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda)
    n = 1 << 30  # 2 GiB of bf16, far past the 60 MB L2
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    times = [events_time(lambda: y.copy_(x), 5) for _ in range(5)]
    bw = 2 * n * 2 / float(np.median(times))
    b.res["meta"]["copy_bw_GBps"] = round(bw / 1e9, 1)
    b.bw = bw


def run_loop(coro: Any) -> Any:
    return LOOP.run_until_complete(coro)


LOOP = asyncio.new_event_loop()


def fast_spec(b: Bench) -> Any:
    from services.engine_host.worker import WorkerSpec

    return WorkerSpec(tier="fast", model="llama-3.2-1b", n_layers=2, seed=0, device="cuda",
                      data_dir=str(b.tmp / "host"), max_batch=64, max_seq=MAX_SEQ, max_tokens=8192, rounds=6, samples=3,
                      target_sample_s=1e-3, noise_floor=0.01, input_sets=3)


def slow_spec(b: Bench, model: str) -> Any:
    """The slow tier as Engine builds it: the whole model, inputs captured at traffic shapes at start,
    graphs for the decode buckets captured and replayed once (process start → first decode step)."""
    from dataclasses import replace

    return replace(fast_spec(b), tier="slow", model=model, n_layers=None, capture_shapes=tuple(traffic_shapes()),
                   warm_buckets=(1, 64), rounds=10, samples=5)


def fast_tier(b: Bench) -> None:
    """The host's own path: Tier → spawned worker → Runtime.benchmark, one candidate after another."""
    from services.engine_host.gpu_faults import hanging_triton_rmsnorm
    from services.engine_host.tiers import Tier
    from services.engine_host.worker import WorkerFailure

    shapes = [("decode", 1, PROMPT, 0.4), ("decode", 64, PROMPT, 0.4), ("prefill", 1, PROMPT, 0.2)]
    tier = Tier("fast", fast_spec(b), 600.0)
    b.tiers["fast"] = tier
    t = time.perf_counter()
    run_loop(tier.start())
    b.m("fast_tier_start_s", round(time.perf_counter() - t, 2))
    n = 4 if b.smoke else 50
    runs = []
    sources = rmsnorm_variants(n)
    stream_began = time.perf_counter()
    for i, src in enumerate(sources):
        if b.left() < 300 and i >= 10:
            break
        t = time.perf_counter()
        out = run_loop(tier.call("benchmark", 120.0, source=src, slot=SLOT, candidate_id=candidate_id(SLOT, src),
                                 shapes=shapes))
        runs.append({"candidate_id": candidate_id(SLOT, src), "status": out["status"],
                     "speedup": out.get("speedup"), "aa_spread": out.get("aa_spread"),
                     "reason": out.get("reason", "")[:200], "seconds": time.perf_counter() - t})
    wall = time.perf_counter() - stream_began
    b.res["fast_tier_runs"] = runs
    b.m("experiments", len(runs))
    b.m("experiments_ok", sum(r["status"] == "OK" for r in runs))
    b.m("experiments_per_hour", round(len(runs) / wall * 3600, 1))
    b.m("fast_tier_s_per_candidate", round(wall / max(len(runs), 1), 3))
    b.m("fast_tier_aa_spread_median", float(np.median([r["aa_spread"] for r in runs if r["aa_spread"]] or [0])))
    b.save()
    # a candidate that faults the device, then one whose kernel spins forever: only the worker dies
    for key, bad, timeout_s in (("device_fault", faulting_triton_rmsnorm(), 120.0),
                                ("hung_kernel", hanging_triton_rmsnorm(), 10.0 if b.smoke else 15.0)):
        t = time.perf_counter()
        record: dict[str, Any] = {"candidate_id": candidate_id(SLOT, bad), "timeout_s": timeout_s}
        try:
            out = run_loop(tier.call("benchmark", timeout_s, source=bad, slot=SLOT,
                                     candidate_id=record["candidate_id"], shapes=shapes))
            record.update(survived_without_crash=True, status=out["status"], reason=out.get("reason", "")[:300])
        except WorkerFailure as failure:
            record.update(status=failure.status, reason=failure.reason[:300])
        record["fault_to_restarted_s"] = round(time.perf_counter() - t, 2)
        record["restart_s"] = round(tier.handle.start_s, 2)
        record["restarts"] = tier.restarts
        t = time.perf_counter()
        out = run_loop(tier.call("benchmark", 120.0, source=sources[0], slot=SLOT,
                                 candidate_id=candidate_id(SLOT, sources[0]), shapes=shapes))
        record["next_candidate_status"] = out["status"]
        record["next_candidate_s"] = round(time.perf_counter() - t, 2)
        record["survived"] = out["status"] == "OK" and tier.alive
        b.res[key] = record
        b.m("fault_recovery_s" if key == "device_fault" else "hang_recovery_s", record["fault_to_restarted_s"])
        b.m("fault_survived" if key == "device_fault" else "hang_survived", record["survived"])
        b.save()


def rank_fast_one(b: Bench, name: str, src: str) -> dict[str, Any]:
    """One rank-correlation candidate on the fast tier at the traffic shapes, more rounds than the stream."""
    t = time.perf_counter()
    out = run_loop(b.tiers["fast"].call("benchmark", 300.0, source=src, slot=SLOT,
                                        candidate_id=candidate_id(SLOT, src), shapes=traffic_shapes(),
                                        rounds=6 if b.smoke else 20))
    row = {"name": name, "candidate_id": candidate_id(SLOT, src), "status": out["status"],
           "speedup": out.get("speedup"), "lo": out.get("speedup_lo"), "hi": out.get("speedup_hi"),
           "aa_spread": out.get("aa_spread"), "reason": out.get("reason", "")[:200],
           "seconds": round(time.perf_counter() - t, 3)}
    print(f"  fast {name:44s} {out['status']} {out.get('speedup', 0) or 0:.3f}", flush=True)
    b.res.setdefault("rank_fast", []).append(row)
    return row


def build(b: Bench, name: str) -> Any:
    t = time.perf_counter()
    table = SlotTable()
    model = build_model(model_args(name), table, seed=0, device="cuda", max_batch=64, max_seq=MAX_SEQ)
    torch.cuda.synchronize()
    b.m(f"{name}.build_s", round(time.perf_counter() - t, 2))
    g = torch.Generator(device="cuda").manual_seed(1)
    prompt = torch.randint(0, model.args.vocab_size, (64, PROMPT), device="cuda", generator=g)
    with torch.inference_mode():
        prefill(model, table.sample, prompt[:, :8])  # warm-up
        torch.cuda.synchronize()
        t = time.perf_counter()
        first = prefill(model, table.sample, prompt)
        torch.cuda.synchronize()
    b.m(f"{name}.prefill_bs64_tok_s", round(64 * PROMPT / (time.perf_counter() - t), 1))
    graphs = DecodeGraphs(model, table, [1, 64])
    b.models[name] = {"model": model, "table": table, "graphs": graphs, "first": first}
    return b.models[name]


def time_decode(step: Any, first: Any, batch: int, reps: int, blocks: int) -> list[float]:
    tok = first[:batch].clone()
    pos = torch.tensor([PROMPT], device="cuda")
    i = [0]

    def one() -> None:
        pos.fill_(PROMPT + i[0] % (GEN - 2))
        i[0] += 1
        step(tok, pos)

    for _ in range(3):
        one()
    return [batch / events_time(one, reps) for _ in range(blocks)]


def decode(b: Bench, name: str) -> None:
    ent = b.models.get(name) or build(b, name)
    model, table, graphs = ent["model"], ent["table"], ent["graphs"]
    reps_e, reps_g = (5, 30) if b.smoke else (15, 100)
    for batch in (1, 64):
        k = f"{name}.bs{batch}"
        with torch.inference_mode():
            def eager(tok: Any, pos: Any) -> Any:
                return table.sample(model(tok.view(-1, 1), pos, kv_len=model.max_seq)[:, -1])

            e = time_decode(eager, ent["first"], batch, reps_e, 2)
            b.m(f"{k}.engine_eager_tok_s", round(float(np.median(e)), 1))
            gr = time_decode(graphs.step, ent["first"], batch, reps_g, 4)
            rebind(model, PlainOps)
            plain_graphs = DecodeGraphs(model, None, [batch])
            pl = time_decode(plain_graphs.step, ent["first"], batch, reps_g, 4)
            del plain_graphs
            rebind(model, table)
            gr2 = time_decode(graphs.step, ent["first"], batch, reps_g, 4)  # A/A: engine again, after
        eng = float(np.median(gr + gr2))
        aa = abs(float(np.median(gr)) / float(np.median(gr2)) - 1.0)
        aa = max(aa, float(np.max(gr + gr2) / np.min(gr + gr2) - 1.0) / 2)
        plain = float(np.median(pl))
        floor = batch * b.bw / step_bytes(model, batch)
        b.m(f"{k}.engine_graphs_tok_s", round(eng, 1))
        b.m(f"{k}.no_slot_table_graphs_tok_s", round(plain, 1))
        b.m(f"{k}.aa_spread", round(aa, 4))
        b.m(f"{k}.slot_table_overhead", round(plain / eng - 1.0, 4))
        b.m(f"{k}.slot_table_within_noise", abs(plain / eng - 1.0) <= max(aa, 0.01))
        b.m(f"{k}.floor_tok_s", round(floor, 1))
        b.m(f"{k}.bytes_per_step", step_bytes(model, batch))
        b.m(f"{k}.engine_graphs_frac_floor", round(eng / floor, 3))
        b.m(f"{k}.engine_eager_frac_floor", round(float(np.median(e)) / floor, 3))
        b.save()


def hot_swap(b: Bench, name: str) -> None:
    """Swap call → Triton candidate loaded, JIT-compiled, installed, its graphs re-captured, first timed step."""
    from services.agent_pool.library.triton import render

    ent = b.models[name]
    model, table, graphs = ent["model"], ent["table"], ent["graphs"]
    src = render(SLOT, {"NUM_WARPS": "8", "ROWS_PER_PROGRAM": "1", "BLOCK_E": "0", "NUM_STAGES": "3"})
    captures_before = graphs.stats.captures
    with torch.inference_mode():
        graphs.ensure(1)
        graphs.ensure(64)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        cand = load_candidate(src, SLOT, b.tmp / "kernels")
        t_load = time.perf_counter()
        x = torch.randn(1, 1, model.args.dim, device="cuda", dtype=torch.bfloat16)
        cand.kernel(x, model.norm, 1e-5)
        torch.cuda.synchronize()
        t_jit = time.perf_counter()
        table.swap(SLOT, cand.kernel, cand.candidate_id)
        tok = ent["first"][:1].clone()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        graphs.ensure(1)
        s.record()
        graphs.step(tok, PROMPT)
        e.record()
        e.synchronize()
        t1 = time.perf_counter()
        step_ms = s.elapsed_time(e)
        stale = graphs.invalid_buckets()  # the swap re-captured bs1 (it ran); bs64 waits until it runs
        table.rollback(SLOT)
    b.m("inprocess.hot_swap_s", round(t1 - t0, 3))
    b.m("inprocess.triton_jit_s", round(t_jit - t_load, 3))
    b.m("inprocess.hot_swap_load_s", round(t_load - t0, 4))
    b.m("inprocess.hot_swap_recapture_s", round(graphs.stats.capture_s[-1], 3))
    b.m("inprocess.hot_swap_model", name)
    b.m("inprocess.hot_swap_first_step_ms", round(step_ms, 3))
    b.m("inprocess.hot_swap_recaptured_buckets", graphs.stats.captures - captures_before)
    b.m("inprocess.hot_swap_stale_after", stale)


FUSED_MLP_REGION = """
import torch
import torch.nn.functional as F

REGION = "mlp_block"
BACKEND = "torch"


def kernel(module, x):
    w13 = module.__dict__.get("fused_w13")  # gate and up stacked once per block, then one GEMM per call
    if w13 is None:
        w13 = module.__dict__["fused_w13"] = torch.cat([module.w1, module.w3])
    gate, up = F.linear(x, w13).chunk(2, dim=-1)
    return F.linear(F.silu(gate.float()).to(x.dtype) * up, module.w2)
"""


def slow_tier(b: Bench) -> None:
    """The slow tier as the host runs it: a worker with the whole 1B model, slot inputs captured at
    traffic-drawn shapes; each rank candidate is timed on the fast tier, then checked and timed on the
    slow tier on captured AND fresh random inputs, then installed and timed end to end (bs64 decode
    through the worker's CUDA graphs)."""
    from scipy.stats import spearmanr

    from services.engine_host.tiers import Tier

    tier = Tier("slow", slow_spec(b, "llama-3.2-1b"), 600.0)
    t = time.perf_counter()
    run_loop(tier.start())
    b.m("llama-3.2-1b.slow_tier_cold_start_s", round(time.perf_counter() - t, 2))
    b.res["slow_tier_info"] = tier.info
    try:
        base = run_loop(tier.call("decode_rate", 120.0, batch=64, steps=30, blocks=3))
        rows = []
        for name, src in rank_candidates()[: 5 if b.smoke else None]:
            if b.left() < 150:
                break
            cid = candidate_id(SLOT, src)
            # each candidate on the fast tier right before the slow one: minutes apart, the GPU's clocks
            # and the other tier's state can move a latency-bound kernel's ratio by 20 %
            f = rank_fast_one(b, name, src) if b.tiers.get("fast") and b.tiers["fast"].alive else {}
            t = time.perf_counter()
            out = run_loop(tier.call("benchmark", 300.0, source=src, slot=SLOT, candidate_id=cid,
                                     shapes=traffic_shapes(), rounds=6 if b.smoke else 20))
            bench_s = time.perf_counter() - t
            e2e = None
            if out["status"] == "OK":
                run_loop(tier.call("swap", 120.0, source=src, slot=SLOT, candidate_id=cid))
                e2e = run_loop(tier.call("decode_rate", 120.0, batch=64, steps=30, blocks=3))
                run_loop(tier.call("rollback", 60.0, slot=SLOT))
            groups = out.get("per_group", {})
            rows.append({"name": name, "candidate_id": cid, "status": out["status"], "reason": out.get("reason", ""),
                         "fast": f.get("speedup"), "fast_aa": f.get("aa_spread"), "fast_s": f.get("seconds"),
                         "slow": out.get("speedup"), "slow_lo": out.get("speedup_lo"), "slow_hi": out.get("speedup_hi"),
                         "slow_aa": out.get("aa_spread"),
                         "slow_captured": groups.get("captured", {}).get("speedup"),
                         "slow_random": groups.get("random", {}).get("speedup"),
                         "captured_sets_checked": out.get("captured_sets_checked"),
                         "e2e_bs64_tok_s": e2e and e2e["tok_s"], "e2e_recaptured": e2e and e2e["recaptured"],
                         "slow_bench_s": round(bench_s, 3), "slow_s": round(time.perf_counter() - t, 3)})
            print(f"  slow {name:44s} {out['status']} {out.get('speedup', 0) or 0:.3f} "
                  f"e2e {e2e and round(e2e['tok_s'])}", flush=True)
            b.res["slow_tier_runs"] = rows
            b.save()
        # a region candidate through the same worker: a fused MLP block (gate and up in one GEMM)
        t = time.perf_counter()
        out = run_loop(tier.call("benchmark", 300.0, source=FUSED_MLP_REGION, slot="mlp_block",
                                 candidate_id=candidate_id("mlp_block", FUSED_MLP_REGION), shapes=traffic_shapes(),
                                 rounds=6 if b.smoke else 20))
        b.res["region_candidate"] = {k: out.get(k) for k in ("status", "reason", "speedup", "speedup_lo",
                                                             "speedup_hi", "aa_spread", "per_item")}
        b.m("region_candidate.mlp_block.status", out["status"])
        b.m("region_candidate.mlp_block.speedup", out.get("speedup"))
        b.m("region_candidate.mlp_block.s", round(time.perf_counter() - t, 2))
    finally:
        run_loop(tier.stop())
    b.m("slow_tier_reference_bs64_tok_s", round(base["tok_s"], 1))
    ok = [r for r in rows if r["status"] == "OK" and r["fast"] and r["slow"]]
    if len(ok) >= 3:
        rho = spearmanr([r["fast"] for r in ok], [r["slow"] for r in ok]).statistic
        b.m("tier_rank_corr", round(float(rho), 3))
        cap = [r for r in ok if r["slow_captured"]]
        if len(cap) >= 3:
            b.m("tier_rank_corr_captured", round(float(spearmanr([r["fast"] for r in cap],
                                                                 [r["slow_captured"] for r in cap]).statistic), 3))
        e2e_rows = [r for r in ok if r["e2e_bs64_tok_s"]]
        if len(e2e_rows) >= 3:
            b.m("tier_rank_corr_e2e", round(float(spearmanr([r["fast"] for r in e2e_rows],
                                                            [r["e2e_bs64_tok_s"] for r in e2e_rows]).statistic), 3))
        sp = [r["slow"] for r in ok]
        b.m("tier_rank_speedup_range", [round(min(sp), 3), round(max(sp), 3)])
        aa = [r["slow_aa"] for r in ok] + [r["fast_aa"] or 0.0 for r in ok]
        b.m("tier_rank_aa_median", round(float(np.median(aa)), 4))
    b.m("tier_rank_candidates", len(ok))
    if rows:
        b.m("slow_tier_s_per_candidate", round(float(np.mean([r["slow_s"] for r in rows])), 3))
        b.m("slow_tier_bench_s_per_candidate", round(float(np.mean([r["slow_bench_s"] for r in rows])), 3))
    fr = b.res.get("rank_fast", [])
    if fr:
        b.m("fast_tier_rank_s_per_candidate", round(float(np.mean([r["seconds"] for r in fr])), 3))


def write_checkpoint(b: Bench, name: str) -> Path:
    """The in-process model's weights as a safetensors file: what a user with a real checkpoint has."""
    from services.engine_host.safetensors_loader import save_file

    path = b.tmp / f"{name}.safetensors"
    t = time.perf_counter()
    save_file(dict(b.models[name]["model"].named_parameters()), path)
    os.sync()
    b.m(f"{name}.checkpoint_write_s", round(time.perf_counter() - t, 2))
    b.m(f"{name}.checkpoint_bytes", path.stat().st_size)
    return path


def swap_variant(stages: int) -> str:
    from services.agent_pool.library.triton import render

    return render(SLOT, {"NUM_WARPS": "8", "ROWS_PER_PROGRAM": "1", "BLOCK_E": "0", "NUM_STAGES": str(stages)})


WARM_STAGES, COLD_STAGES = (3, 5, 6), (4, 7)  # NUM_STAGES values: the Triton cache key differs per value


def slow_8b(b: Bench, name: str) -> None:
    """Cold start of the production slow tier (spawn → imports → weights → inputs captured at traffic
    shapes → graphs for bs 1 and 64 → one decode step each), once on seeded random weights and once
    from a safetensors checkpoint; then hot swaps through the checkpoint tier's worker."""
    from dataclasses import replace

    from services.engine_host.tiers import Tier

    spec = slow_spec(b, name)
    tier = Tier("slow", spec, 600.0)
    t = time.perf_counter()
    run_loop(tier.start())
    b.m(f"{name}.cold_start_random_weights_s", round(time.perf_counter() - t, 2))
    b.res["slow_tier_start_random"] = tier.info.get("start_stages")
    run_loop(tier.stop())
    if name in b.models:
        spec = replace(spec, checkpoint=str(write_checkpoint(b, name)))
    tier = Tier("slow", spec, 600.0)
    t = time.perf_counter()
    run_loop(tier.start())
    b.m(f"{name}.cold_start_s", round(time.perf_counter() - t, 2))
    b.m(f"{name}.cold_start_weights", "checkpoint (page cache warm)" if spec.checkpoint else "random")
    b.res["slow_tier_start_checkpoint"] = tier.info.get("start_stages")
    try:
        run_loop(tier.call("decode_rate", 120.0, batch=1, steps=5, blocks=1))
        # warm cache: compiled at the same width into the same TRITON_CACHE_DIR first, as the fast tier of
        # the same host does when it screens a candidate before the slow tier ever sees it
        dim = b.models[name]["model"].args.dim if name in b.models else 4096
        x = torch.randn(1, 1, dim, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(dim, device="cuda", dtype=torch.bfloat16)
        for stages in WARM_STAGES:
            load_candidate(swap_variant(stages), SLOT, b.tmp / "kernels").kernel(x, w, 1e-5)
        torch.cuda.synchronize()
        runs: dict[str, list[dict[str, Any]]] = {"cold_jit": [], "warm_cache": []}
        for key, stages in [("cold_jit", s) for s in COLD_STAGES] + [("warm_cache", s) for s in WARM_STAGES]:
            src = swap_variant(stages)
            t0 = time.perf_counter()
            sw = run_loop(tier.call("swap", 120.0, source=src, slot=SLOT, candidate_id=candidate_id(SLOT, src),
                                    warm=True))
            t1 = time.perf_counter()
            first = run_loop(tier.call("decode_rate", 120.0, batch=1, steps=1, blocks=1))
            total = time.perf_counter() - t0
            run_loop(tier.call("rollback", 60.0, slot=SLOT))
            run_loop(tier.call("decode_rate", 120.0, batch=1, steps=1, blocks=1))  # back on the reference
            runs[key].append({"stages": stages, "swap": sw, "swap_call_s": t1 - t0, "first": first,
                              "total_s": total})
            print(f"  hot swap {key} stages={stages}: {total:.3f} s (swap {sw.get('swap_s', 0):.3f}, "
                  f"jit {sw.get('jit_s', 0):.3f}, capture {first.get('capture', {})})", flush=True)
        for key, rows in runs.items():
            b.res[f"hot_swap.{key}"] = rows
            totals = [r["total_s"] for r in rows if r["swap"].get("status") == "OK"]
            if totals:
                b.m(f"hot_swap_{key}_s", round(float(np.median(totals)), 3))
                b.m(f"triton_jit_{key}_s", round(float(np.median([r["swap"]["jit_s"] for r in rows
                                                                   if r["swap"].get("status") == "OK"])), 3))
                caps = [r["first"].get("capture", {}) for r in rows]
                b.m(f"hot_swap_{key}_recapture_s", round(float(np.median([c.get("total_s", 0) for c in caps])), 3))
                b.m(f"hot_swap_{key}_targeted_warmup", all(c.get("targeted_warmup") for c in caps))
    finally:
        run_loop(tier.stop())


def region_swap(b: Bench) -> None:
    """A fused mlp_block (one gate+up GEMM, a Triton silu_mul) replaces the region; graphs follow."""
    import torch.nn.functional as F

    from services.agent_pool.library.triton import template

    ent = b.models["llama-3.2-1b"]
    model, table = ent["model"], ent["table"]
    regions = RegionTable(model)
    graphs = DecodeGraphs(model, table, [1, 64], regions=regions)
    silu = load_candidate(template("silu_mul"), "silu_mul", b.tmp / "kernels").kernel

    def fused_mlp(module: Any, x: Any) -> Any:
        w13 = module.__dict__.get("_w13")
        if w13 is None:
            w13 = module.__dict__["_w13"] = torch.cat([module.w1, module.w3])
        gate, up = F.linear(x, w13).chunk(2, dim=-1)
        return F.linear(silu(gate, up), module.w2)

    with torch.inference_mode():
        ref = float(np.median(time_decode(graphs.step, ent["first"], 1, 50, 3)))
        tokens_ref = graphs.step(ent["first"][:64].clone(), PROMPT).clone()
        n0 = graphs.stats.captures
        regions.install("mlp_block", fused_mlp, "fused-mlp")
        fused = float(np.median(time_decode(graphs.step, ent["first"], 1, 50, 3)))
        tokens_fused = graphs.step(ent["first"][:64].clone(), PROMPT).clone()
        n1 = graphs.stats.captures
        table.swap("silu_mul", REFERENCES["silu_mul"], "reference-again")  # not used by the fused graphs
        graphs.step(ent["first"][:1].clone(), PROMPT)
        n2 = graphs.stats.captures
        regions.rollback("mlp_block")
        table.rollback("silu_mul")
    b.res["region_swap"] = {"reference_bs1_tok_s": ref, "fused_mlp_bs1_tok_s": fused,
                            "captures_after_install": n1 - n0, "captures_after_unused_slot_swap": n2 - n1,
                            "token_agreement_bs64": float((tokens_ref == tokens_fused).float().mean())}


def compile_baseline(b: Bench, name: str, batch: int) -> None:
    ent = b.models[name]
    model = ent["model"]
    rebind(model, PlainOps)
    try:
        def step(tok: Any, pos: Any) -> Any:
            return PlainOps.sample(model(tok.view(-1, 1), pos, kv_len=model.max_seq)[:, -1])

        fn = torch.compile(step, mode="reduce-overhead", dynamic=False)
        with torch.inference_mode():
            t = time.perf_counter()
            tok = ent["first"][:batch].clone()
            pos = torch.tensor([PROMPT], device="cuda")
            for _ in range(3):
                fn(tok, pos)
            torch.cuda.synchronize()
            b.m(f"{name}.bs{batch}.compile_s", round(time.perf_counter() - t, 1))
            c = time_decode(fn, ent["first"], batch, 30 if b.smoke else 100, 3)
        k = f"{name}.bs{batch}"
        b.m(f"{k}.compile_tok_s", round(float(np.median(c)), 1))
        b.m(f"{k}.compile_frac_floor", round(float(np.median(c)) / b.res["metrics"][f"{k}.floor_tok_s"], 3))
    finally:
        rebind(model, ent["table"])


def compile_restart(b: Bench, name: str) -> None:
    """What a user's torch.compile engine costs to restart, in a fresh process with the inductor and
    Triton caches the in-process compiles above left warm: imports → weights → compile bs1 and bs64
    (reduce-overhead) → first decode step."""
    t0 = time.time()
    proc = subprocess.run([sys.executable, __file__, "--cold-start", name, "--t0", repr(t0)],
                          capture_output=True, text=True, timeout=max(30, b.left() - 15), cwd=REPO)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"compile restart failed ({proc.returncode}): {proc.stderr[-1500:]}")
    info = json.loads(lines[-1])
    b.res[f"compile_restart.{name}"] = info
    b.m(f"{name}.compile_restart_warm_cache_s", round(info["t_end"] - t0, 2))


def cold_child(name: str, t0: float) -> None:
    phases = {"imported_s": time.time() - t0}
    table = SlotTable()
    model = build_model(model_args(name), table, seed=0, device="cuda", max_batch=64, max_seq=MAX_SEQ)
    rebind(model, PlainOps)
    torch.cuda.synchronize()
    phases["weights_s"] = time.time() - t0

    def step(tok: Any, pos: Any) -> Any:
        return PlainOps.sample(model(tok.view(-1, 1), pos, kv_len=model.max_seq)[:, -1])

    fns = {bs: torch.compile(step, mode="reduce-overhead", dynamic=False) for bs in (1, 64)}
    with torch.inference_mode():
        pos = torch.tensor([PROMPT], device="cuda")
        for bs, fn in fns.items():
            tok = torch.ones(bs, dtype=torch.long, device="cuda")
            for _ in range(3):
                fn(tok, pos)
        torch.cuda.synchronize()
        phases["compiled_s"] = time.time() - t0
        prompt = torch.randint(0, model.args.vocab_size, (1, PROMPT), device="cuda")
        tok = prefill(model, PlainOps.sample, prompt)
        fns[1](tok, pos).tolist()
    phases["t_end"] = time.time()
    print(json.dumps(phases), flush=True)


def summary(b: Bench) -> None:
    m = b.res["metrics"]
    big = "llama-3.1-8b" if m.get("llama-3.1-8b.cold_start_s") else "llama-3.2-1b"
    cold, hot = m.get(f"{big}.cold_start_s"), m.get("hot_swap_warm_cache_s")
    hot_jit = m.get("hot_swap_cold_jit_s")
    if cold:
        m["cold_start_s"] = cold
        m["cold_start_model"] = big
    if hot:
        # the slow tier's path: a candidate the fast tier already screened (so compiled, into the shared
        # Triton cache) is swapped in; the JIT the fast tier paid is triton_jit_s, reported separately
        m["hot_swap_s"] = hot
        m["triton_jit_s"] = m.get("triton_jit_cold_jit_s")
    if cold and hot:
        m["swap_ratio"] = round(cold / hot, 1)  # against the engine's own cold start
    if cold and hot_jit:
        m["swap_ratio_incl_cold_jit"] = round(cold / hot_jit, 1)  # a never-compiled kernel, JIT included
    parts = [m.get(f"{big}.bs1.compile_s"), m.get(f"{big}.bs64.compile_s")]
    if cold and all(parts):  # first start of a torch.compile engine: empty caches (compiles summed)
        m[f"{big}.compile_restart_cold_cache_s"] = round(cold + sum(parts), 1)
    for label in ("cold_cache", "warm_cache"):
        restart = m.get(f"{big}.compile_restart_{label}_s")
        if restart and hot_jit:
            m[f"swap_ratio_vs_compile_restart_{label}"] = round(restart / hot_jit, 1)
    b.res["targets"] = {
        "hot_swap_s<=1": m.get("hot_swap_s", 1e9) <= 1, "swap_ratio>=100": m.get("swap_ratio", 0) >= 100,
        "experiments_per_hour>=2000": m.get("experiments_per_hour", 0) >= 2000,
        "tier_rank_corr>=0.9": (m.get("tier_rank_corr") or 0) >= 0.9,
        "slot_table_within_noise": all(v for k, v in m.items() if k.endswith("slot_table_within_noise")),
        "fault_survived": bool(m.get("fault_survived")), "hang_survived": bool(m.get("hang_survived")),
    }
    b.save()
    for k in sorted(m):
        print(f"{k:48s} {m[k]}")
    print(json.dumps(b.res["targets"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--smoke", action="store_true", help="small versions of every measurement")
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--cold-start", default="", help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cold_start:
        cold_child(a.cold_start, a.t0)
        return
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    a.out.mkdir(parents=True, exist_ok=True)
    b = Bench(a.out, a.smoke, a.budget_s)
    b.section("env", lambda: env(b), 5)
    b.section("fast_tier", lambda: fast_tier(b), 60)
    big = "llama-3.2-1b" if a.smoke else "llama-3.1-8b"
    b.section(f"decode.{big}", lambda: decode(b, big), 40)
    b.section("hot_swap_inprocess", lambda: hot_swap(b, big), 15)
    if not a.smoke:
        b.section("decode.llama-3.2-1b", lambda: decode(b, "llama-3.2-1b"), 30)
    b.section("slow_tier", lambda: slow_tier(b), 60)  # the fast tier times each rank candidate here too
    if b.tiers.get("fast") and b.tiers["fast"].alive:
        run_loop(b.tiers["fast"].stop())
    b.section("region_swap", lambda: region_swap(b), 15)
    b.section(f"slow_tier_start.{big}", lambda: slow_8b(b, big), 90)
    for name, batch in (("llama-3.2-1b", 1), ("llama-3.2-1b", 64), ("llama-3.1-8b", 1), ("llama-3.1-8b", 64)):
        if name in b.models and not (a.smoke and batch == 64):
            b.section(f"compile.{name}.bs{batch}", lambda n=name, bs=batch: compile_baseline(b, n, bs),
                      45 if "1b" in name else 65)
    if not a.smoke:
        b.section(f"compile_restart.{big}", lambda: compile_restart(b, big), 75)
    summary(b)


if __name__ == "__main__":
    main()
