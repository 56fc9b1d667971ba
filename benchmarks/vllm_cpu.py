"""vLLM on the CPU with the Polymorph plugin and without it, and how soon a promotion is served.

    make .venv-vllm/.installed && .venv-vllm/bin/python benchmarks/vllm_cpu.py [--pairs 2] [--blocks 3]
        [--concurrency 8] [--max-tokens 64] [--out benchmarks/results/vllm-cpu.json] [--no-markdown]

A real vLLM OpenAI-compatible server (vllm-cpu, eager) on llama-tiny exported as a HF checkpoint (the
live test's, tests/adapters/vllm_server.py). Servers alternate, `--pairs` times: *without* the plugin
(`VLLM_PLUGINS=` loads no plugin) and *with* it (its entry point, beside `polymorph up`'s stack, nothing
promoted: every slot calls vLLM's own op through the table). Each server is warmed up, then timed in
`--blocks` blocks of `--concurrency` concurrent greedy completions of `--max-tokens` tokens: output
tokens per second of wall time, median and spread over blocks.

Then, with the plugin and requests running back to back, a kernel is promoted the way the registry
promotes one (a KernelPromoted signed with the registry's key on kernel.promoted): the time until the
worker has checked and installed it, and until its first call in a served forward (the table stamps
each candidate's first call). Results in the JSON file and BENCHMARKS.md ("vLLM plugin on the CPU").
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import nats  # noqa: E402
import openai  # noqa: E402

from benchmarks.markdown import update_section  # noqa: E402
from proto.gen.polymorph.v1 import events_pb2 as ev  # noqa: E402
from services.common import subjects  # noqa: E402
from services.common.signing import PUBLIC_FILE, Signer  # noqa: E402
from services.console.demo import wait_ready  # noqa: E402
from services.console.stack import Stack  # noqa: E402
from tests.adapters.kernels import RMSNORM, ids  # noqa: E402
from tests.adapters.vllm_server import tiny_checkpoint, vllm_server  # noqa: E402

PROMPT = " ".join(f"w{7 + (i * 37) % 2000}" for i in range(48))  # 48 words: a short chat turn


def tree_cpu_s(pids: list[int]) -> float:
    """CPU seconds used so far by these processes and every live descendant (/proc; reaped children
    count through their parents' cutime)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    wanted, total, frontier = set(pids), 0.0, list(pids)
    while frontier:
        pid = frontier.pop()
        total += stats.get(pid, (0, 0.0))[1]
        children = [c for c, (ppid, _) in stats.items() if ppid == pid and c not in wanted]
        wanted.update(children)
        frontier.extend(children)
    return total


def timed_blocks(api: openai.OpenAI, blocks: int, concurrency: int, max_tokens: int,
                 stack_pids: list[int]) -> list[tuple[float, float]]:
    """(output tokens per second, CPU seconds the Polymorph stack used meanwhile) of each block of
    `concurrency` concurrent completions: the stack shares this machine's cores with vLLM, so a campaign
    it runs during a block would be counted against the plugin."""

    def one(_: int) -> int:
        r = api.completions.create(model="llama-tiny", prompt=PROMPT, max_tokens=max_tokens, temperature=0.0,
                                   extra_body={"ignore_eos": True})
        return int(r.usage.completion_tokens) if r.usage else 0

    rates = []
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(concurrency)))  # warm-up: first requests compile and allocate
        for _ in range(blocks):
            cpu0, t0 = tree_cpu_s(stack_pids), time.perf_counter()
            tokens = sum(pool.map(one, range(concurrency)))
            rates.append((tokens / (time.perf_counter() - t0), tree_cpu_s(stack_pids) - cpu0))
    return rates


def worker_state(state_dir: Path) -> dict[str, Any]:
    """The live worker's state file: the newest (earlier servers' workers left theirs behind)."""
    files = sorted(state_dir.glob("worker-*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(files[-1].read_text()) if files else {}


async def promote_and_wait(stack: Stack, state_dir: Path, api: openai.OpenAI, timeout_s: float) -> dict[str, Any]:
    """Promote a correct rmsnorm while requests run; seconds from the publish to installed and to its
    first served call (the worker's own clock stamps both; same machine)."""
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            api.completions.create(model="llama-tiny", prompt=PROMPT, max_tokens=8, temperature=0.0,
                                   extra_body={"ignore_eos": True})

    runner = threading.Thread(target=traffic, daemon=True)
    runner.start()
    good_id, _ = ids()
    msg = ev.KernelPromoted(candidate_id=good_id, slot="rmsnorm", model="llama-tiny",
                            hardware=worker_state(state_dir).get("hardware", ""), source=RMSNORM,
                            backend=ev.BACKEND_TORCH, promoted_unix=time.time())
    Signer.load_or_create(stack.data_dir / "registry").sign(msg)
    nc = await nats.connect(stack.url_for("registry"))
    try:
        published = time.time()
        await nc.jetstream().publish(subjects.KERNEL_PROMOTED, msg.SerializeToString(),
                                     headers={"Nats-Msg-Id": f"bench-{good_id}"})
    finally:
        await nc.close()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            state = worker_state(state_dir)
            slot = state.get("slots", {}).get("rmsnorm", {})
            first = slot.get("first_call_unix", {}).get(good_id)
            if first:
                installed = next((e["unix"] for e in state["events"]
                                  if e["action"] == "installed" and e["candidate_id"] == good_id), None)
                return {"candidate_id": good_id,
                        "to_installed_s": round(installed - published, 3) if installed else None,
                        "to_first_served_call_s": round(first - published, 3)}
            await asyncio.sleep(0.2)
        return {"candidate_id": good_id, "error": f"not served within {timeout_s:.0f} s",
                "refused": worker_state(state_dir).get("refused", {})}
    finally:
        stop.set()
        runner.join(60)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"meta": {
        "date": dt.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "args": {k: v for k, v in vars(args).items() if k != "out"}}, "without": [], "with": [],
        "without_stack_cpu_s": [], "with_stack_cpu_s": []}
    import torch
    import vllm

    res["meta"].update(torch=torch.__version__, vllm=vllm.__version__)
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
        root = Path(tmp)
        ckpt = tiny_checkpoint(root / "llama-tiny-hf")
        stack = Stack(root / "stack", extra_env={"POLYMORPH_LOG_LEVEL": "warning"}, port=-1)
        stack.start()
        try:
            await wait_ready(stack.nats_url, stack)
            state_dir = root / "serving"
            plugin_env = {"POLYMORPH_NATS_URL": stack.url_for("serving"), "POLYMORPH_MODEL": "llama-tiny",
                          "POLYMORPH_REGISTRY_PUBLIC_KEY_FILE": str(stack.data_dir / "registry" / PUBLIC_FILE),
                          "POLYMORPH_SERVING_STATE_DIR": str(state_dir), "POLYMORPH_TRAFFIC_TAG": "bench"}
            for pair in range(args.pairs):
                for label, env in (("without", {"VLLM_PLUGINS": ""}), ("with", plugin_env)):
                    print(f"pair {pair + 1}/{args.pairs}: vLLM {label} the plugin", flush=True)
                    with vllm_server(ckpt, env, root / f"vllm-{label}-{pair}.log") as url:
                        api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
                        pids = [p.pid for p in stack.processes.values()]
                        blocks = await asyncio.to_thread(timed_blocks, api, args.blocks, args.concurrency,
                                                         args.max_tokens, pids)
                        res[label].extend(round(r, 1) for r, _ in blocks)
                        res[f"{label}_stack_cpu_s"].extend(round(c, 2) for _, c in blocks)
                        print(f"  {', '.join(f'{r:.0f} tok/s (stack {c:.1f} CPU s)' for r, c in blocks)}",
                              flush=True)
                        if label == "with" and pair == args.pairs - 1:
                            print("promoting a kernel while requests run", flush=True)
                            res["promotion"] = await promote_and_wait(stack, state_dir, api, timeout_s=120)
                            print(f"  {res['promotion']}", flush=True)
        finally:
            stack.stop()
    for label in ("without", "with"):
        rates = res[label]
        res[f"{label}_median"] = round(statistics.median(rates), 1)
        res[f"{label}_spread"] = round((max(rates) - min(rates)) / statistics.median(rates), 3)
        res[f"{label}_stack_cpu_median_s"] = round(statistics.median(res[f"{label}_stack_cpu_s"]), 2)
    res["overhead"] = round(1 - res["with_median"] / res["without_median"], 4)
    res["overhead_interval"] = overhead_interval(res["without"], res["with"])
    return res


def overhead_interval(without: list[float], with_: list[float], resamples: int = 4000) -> list[float]:
    """95 % bootstrap interval of 1 - median(with)/median(without), blocks resampled within each
    condition: the overhead is within noise when the interval holds 0."""
    rng = random.Random(0)
    ratios = sorted(1 - statistics.median(rng.choices(with_, k=len(with_)))
                    / statistics.median(rng.choices(without, k=len(without))) for _ in range(resamples))
    return [round(ratios[int(0.025 * resamples)], 4), round(ratios[int(0.975 * resamples) - 1], 4)]


def markdown(res: dict[str, Any], command: str) -> str:
    m, p = res["meta"], res.get("promotion", {})
    lo, hi = res["overhead_interval"]
    a = m["args"]
    rows = [f"| {label} the plugin | {res[f'{label}_median']:,.1f} | {res[f'{label}_spread']:.1%} | "
            f"{res.get(f'{label}_stack_cpu_median_s', float('nan')):.2f} | "
            f"{', '.join(f'{r:,.0f}' for r in res[label])} |" for label in ("without", "with")]
    served = (f"{p['to_installed_s']:.2f} s to checked and installed, {p['to_first_served_call_s']:.2f} s to its "
              "first call in a served forward" if "to_first_served_call_s" in p else f"not served: {p}")
    return "\n".join([
        "## vLLM plugin on the CPU (`benchmarks/vllm_cpu.py`)",
        "",
        f"vllm {m['vllm']} (vllm-cpu), torch {m['torch']}, {m['cpus']} cores, {m['date']}; llama-tiny exported "
        f"as a HF checkpoint (float32, eager); {a['pairs']} alternating server pairs x {a['blocks']} blocks of "
        f"{a['concurrency']} concurrent greedy completions of {a['max_tokens']} tokens. Command:",
        "",
        f"    {command}",
        "",
        "| vLLM | median output tok/s | spread (max-min)/median | stack CPU s per block (median) | blocks |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"Overhead of the plugin with nothing promoted: {res['overhead']:.1%} of the median, 95 % bootstrap "
        f"interval {lo:+.1%} to {hi:+.1%} ({'holds 0: within noise' if lo <= 0 <= hi else 'excludes 0'}; the "
        f"blocks' own spread is {max(res['without_spread'], res['with_spread']):.1%}). A promoted rmsnorm, "
        f"signed as the registry signs, with requests running: {served}.",
        "",
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "vllm-cpu.json")
    p.add_argument("--no-markdown", action="store_true")
    args = p.parse_args()
    res = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    command = ".venv-vllm/bin/python benchmarks/vllm_cpu.py " + " ".join(sys.argv[1:])
    text = markdown(res, command.strip())
    print(text)
    if not args.no_markdown:
        update_section("vllm-cpu", text)


if __name__ == "__main__":
    main()
