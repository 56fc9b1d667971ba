"""The harness's own paths: graphs in Generate/Profile/decode rate, captured-input timing, hangs.

CPU tests run a Harness in-process (its sandboxes are real processes; eager, as production on a CPU);
the GPU tests check that the same calls go through CUDA graphs there and that a spinning Triton
kernel is killed by the sandbox timeout while the harness carries on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from services.common.shapes import Shape
from services.engine_host.cuda_graphs import DecodeGraphs
from services.engine_host.cuda_graphs import generate as graph_generate
from services.engine_host.gpu_faults import hanging_triton_rmsnorm
from services.engine_host.harness_core import Harness
from services.engine_host.loader import candidate_id
from services.engine_host.models.llama import build_model, generate, model_args
from services.engine_host.ops import OpTable
from services.engine_host.protocol import (
    Benchmark,
    CandidateCode,
    DecodeRate,
    Generate,
    HarnessSpec,
    Install,
    Profile,
    Status,
)
from services.engine_host.slots import REFERENCES
from tests.engine_host.candidates import RMSNORM_FAST, source
from tests.helpers import sandbox_relax

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SHAPES = (Shape("decode", 2, 24, 0.6), Shape("prefill", 1, 16, 0.4))


def code(op: str, src: str) -> CandidateCode:
    return CandidateCode(candidate_id(op, src), op, src)


@pytest.fixture
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    device, kw = getattr(request, "param", ("cpu", {}))
    spec = HarnessSpec(tier="slow", model="llama-tiny", n_layers=None, seed=1, device=device, data_dir=str(tmp_path),
                       max_batch=4, rounds=2, samples=2, target_sample_s=1e-4, capture_shapes=SHAPES,
                       sandbox_relax=sandbox_relax(), **kw)
    with torch.inference_mode():
        h = Harness(spec, lambda _: None)
    try:
        yield h
    finally:
        h.close()


@torch.inference_mode()
def test_graph_generate_keeps_logits_and_a_recapture_never_touches_the_prompt() -> None:
    table = OpTable()
    model = build_model(model_args("llama-tiny", 2), table, seed=3, max_batch=2, max_seq=48)
    graphs = DecodeGraphs(model, table, [1, 2])
    g = torch.Generator().manual_seed(0)
    first = torch.randint(0, model.args.vocab_size, (1, 5), generator=g)
    graph_generate(graphs, first, 4)  # leaves the bucket's static position at 7
    table.swap("rmsnorm", lambda x, w, eps: REFERENCES["rmsnorm"](x, w, eps), "same-but-new")
    prompt = torch.randint(0, model.args.vocab_size, (1, 20), generator=g)
    got, logits = graph_generate(graphs, prompt, 6)  # re-captures bucket 1 while the prompt is in the cache
    want, want_logits = generate(model, prompt, 6)
    assert graphs.stats.recaptured == [1]
    assert torch.equal(got, want) and torch.allclose(logits, want_logits, atol=1e-4)


def test_the_real_data_tier_times_on_captured_and_random_inputs(harness: Harness) -> None:
    assert harness.ref_graphs is None  # the CPU stays eager
    with torch.inference_mode():
        out = harness.handle(Benchmark(code("rmsnorm", source("rmsnorm", RMSNORM_FAST)), SHAPES))
        assert out.status == Status.OK, out
        assert set(out.per_group) == {"captured", "random"} and out.checked_calls >= 2
        assert any(k.startswith("captured:") for k in out.per_item)
        rate = harness.handle(DecodeRate(2, steps=2, blocks=1))
    assert rate.tok_s > 0 and not rate.graphs


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]  # R, S, T (stopped), ...


def test_every_timed_sandbox_is_stopped_while_the_harness_writes_fresh_inputs(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # a candidate thread that watched the input buffers could otherwise compute the next answers
    # before the call it is timed on: both sides of the comparison must be stopped while inputs change
    from services.engine_host.remote import RemoteRunner
    from services.engine_host.workitems import Buffers

    timed: list[int] = []  # the sandboxes the two runners time: the live engine and the candidate's
    seen: list[tuple[str, ...]] = []
    refresh, runner_init = Buffers.refresh, RemoteRunner.__init__

    def runner(self: RemoteRunner, *args: Any, **kw: Any) -> None:
        runner_init(self, *args, **kw)
        timed.append(self.box.child.pid)

    def watched(bufs: Buffers) -> None:
        seen.append(tuple(_state(pid) for pid in timed))
        refresh(bufs)

    monkeypatch.setattr(RemoteRunner, "__init__", runner)
    monkeypatch.setattr(Buffers, "refresh", watched)
    with torch.inference_mode():
        out = harness.handle(Benchmark(code("rmsnorm", source("rmsnorm", RMSNORM_FAST)), SHAPES))
    assert out.status == Status.OK, out
    assert seen and all(len(states) == 2 for states in seen), seen
    assert all(states == ("T", "T") for states in seen), [(i, s) for i, s in enumerate(seen) if s != ("T", "T")]


def test_sandboxes_die_in_the_background_but_never_while_the_next_candidate_is_timed(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # a candidate's sandbox (and the incumbent's) exits while the next candidate loads and is checked:
    # a CUDA context takes ~0.1 s to tear down; its teardown must not overlap anyone's timing
    from services.engine_host import harness_bench
    from services.engine_host.sandboxes import Sandbox

    reaped, compare = Sandbox._reaped, harness_bench.compare
    exiting: list[list[bool]] = []

    def slow_reap(self: Sandbox, strays: set[int]) -> None:
        time.sleep(1.0)  # as slow as a GPU's teardown, and then some
        reaped(self, strays)

    def timed(*args: Any, **kw: Any) -> Any:
        exiting.append([box.child.alive for box in harness.dying] + [t.name == "sandbox-reap" for t in
                                                                     threading.enumerate()])
        return compare(*args, **kw)

    monkeypatch.setattr(Sandbox, "_reaped", slow_reap)
    monkeypatch.setattr(harness_bench, "compare", timed)
    with torch.inference_mode():
        first = harness.handle(Benchmark(code("rmsnorm", source("rmsnorm", RMSNORM_FAST)), SHAPES))
        closing = list(harness.dying)
        second = harness.handle(Benchmark(code("rmsnorm", "# second\n" + source("rmsnorm", RMSNORM_FAST)), SHAPES))
    assert first.status == second.status == Status.OK, (first, second)
    assert len(closing) == 2 and all(not box.child.alive for box in closing)  # candidate and incumbent
    assert len(exiting) == 2 and not any(exiting[1]), exiting


@gpu
@needs_cuda
@pytest.mark.parametrize("harness", [("cuda", {"warm_buckets": (1,)})], indirect=True)
def test_harness_paths_run_through_cuda_graphs(harness: Harness) -> None:
    with torch.inference_mode():
        out = harness.handle(Generate((3, 5, 7, 9), 5, return_logits=True))
        assert out.status == Status.OK and len(out.tokens) == 5
        ref = harness.handle(Generate((3, 5, 7, 9), 5, reference_only=True, return_logits=True))
        assert ref.tokens == out.tokens
        prof = harness.handle(Profile((Shape("decode", 2, 24),)))
        assert prof.graphs and prof.eager_step_us
        fast = code("rmsnorm", source("rmsnorm", RMSNORM_FAST))
        assert harness.handle(Install(fast, warm=True)).status == Status.OK
        rate = harness.handle(DecodeRate(2, steps=5, blocks=2))
        assert rate.graphs and rate.tok_s > 0
        bench = harness.handle(Benchmark(code("rmsnorm", "# other\n" + source("rmsnorm", RMSNORM_FAST)), SHAPES))
        assert bench.status == Status.OK and "captured" in bench.per_group


@gpu
@needs_cuda
@pytest.mark.parametrize("harness", [("cuda", {"candidate_timeout_s": 10.0})], indirect=True)
def test_a_spinning_triton_kernel_is_killed_by_the_timeout(harness: Harness) -> None:
    with torch.inference_mode():
        out = harness.handle(Benchmark(code("rmsnorm", hanging_triton_rmsnorm()), SHAPES))
        assert out.status == Status.TIMEOUT, out
        again = harness.handle(Benchmark(code("rmsnorm", source("rmsnorm", RMSNORM_FAST)), SHAPES))
    assert again.status == Status.OK  # the harness and its live engine carry on


DECODE_ONLY = (Shape("decode", 2, 24),)
PYTHON_HEAVY = '''
import time
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    until = time.perf_counter() + 2e-4  # host work a CUDA graph replay never repeats
    while time.perf_counter() < until:
        pass
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * weight
'''
NOT_CAPTURABLE = '''
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    if float(x.abs().max()) > 1e30:  # a host sync: not allowed while a stream is captured
        raise ValueError("huge")
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * weight
'''


@gpu
@needs_cuda
@pytest.mark.parametrize("harness", [("cuda", {"rounds": 6})], indirect=True)
def test_decode_items_are_timed_as_graph_replays_as_the_live_engine_runs_them(harness: Harness) -> None:
    # 200 µs of Python per call against a ~10 µs kernel: eagerly timed it would be ~20x slower; the live
    # engine replays decode steps from CUDA graphs, where the host work happened once at capture
    with torch.inference_mode():
        out = harness.handle(Benchmark(code("rmsnorm", PYTHON_HEAVY), DECODE_ONLY))
        assert out.status == Status.OK, out
        assert out.speedup > 0.5, out
        stuck = harness.handle(Benchmark(code("rmsnorm", NOT_CAPTURABLE), DECODE_ONLY))
    assert stuck.status == Status.RAISED and "CUDA graph" in stuck.reason, stuck


@needs_cuda
@pytest.mark.parametrize("harness", [("cuda", {})], indirect=True)
def test_the_memory_shared_with_dead_sandboxes_is_given_back(harness: Harness) -> None:
    # every candidate gets a sandbox of its own, killed after its run: what the harness shared with it
    # must not stay allocated (ipc_refs.py), or a long-running tier runs out of device memory
    def settled() -> int:  # the incumbent's sandbox is reaped (and given back) by a background thread
        deadline = time.monotonic() + 60
        while any(t.name == "sandbox-reap" for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.05)
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()
        return torch.cuda.memory_allocated()

    with torch.inference_mode():
        base = settled()
        mem = []
        for i in range(7):
            out = harness.handle(Benchmark(code("rmsnorm", f"# variant {i}\n" + source("rmsnorm", RMSNORM_FAST)),
                                           SHAPES))
            assert out.status == Status.OK, out
            mem.append(settled())
    one = max(mem[0] - base, 0)  # what one candidate left behind, if anything
    assert mem[-1] - mem[1] <= one / 4 + (1 << 20), (base, mem)  # leaking, it would grow by `one` each time
