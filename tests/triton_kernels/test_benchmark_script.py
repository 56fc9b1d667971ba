"""benchmarks/triton_kernels_gpu.py's own logic on the CPU: variants loaded, checked, timed and tabled.

The script needs a GPU to time for real; here its device is the CPU, its kernels run under the
interpreter, do_bench is replaced by a wall-clock timer and the shapes are tiny, so a bug in the
script shows up before it costs GPU time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "triton_kernels_gpu.py"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("triton_kernels_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when each variant's kernel is decorated

    def wall_us(fn, args):
        t0 = time.perf_counter()
        fn()
        us = (time.perf_counter() - t0) * 1e6
        return us, us, us

    monkeypatch.setattr(mod, "DEVICE", "cpu")
    monkeypatch.setattr(mod, "MODELS", {"tiny": {"E": 200, "I": 257}})
    monkeypatch.setattr(mod, "bench_us", wall_us)
    return mod


def test_help_works_without_a_gpu() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0 and "--out" in out.stdout and "--max-variants" in out.stdout


@pytest.mark.parametrize("op", ["rmsnorm", "add_rmsnorm", "silu_mul"])
def test_checks_times_and_reports_variants(bench: ModuleType, op: str, tmp_path: Path, capsys) -> None:
    args = bench.parse_args(["--out", str(tmp_path / "r.json"), "--dtype", "float32", "--max-variants", "3"])
    variants = bench.load_variants(op, args, tmp_path)
    assert len(variants) == 3 and all("module" in v for v in variants)
    entry = bench.run_shape(op, "tiny", 3, variants, None, args, torch.float32)
    assert entry["n_ok"] == 3 and entry["n_failed"] == 0, entry["variants"]
    assert entry["best"]["us"] > 0 and entry["best"]["speedup_vs_eager"] > 0
    assert all(r["inputs_untouched"] and r["max_abs_err"] < 1e-4 for r in entry["variants"])
    bench.print_table([entry], verbose=True)
    assert op in capsys.readouterr().out
    json.dumps(entry, default=str)  # what main() writes must serialise


def test_a_wrong_variant_is_reported_not_timed(bench: ModuleType, tmp_path: Path) -> None:
    args = bench.parse_args(["--out", str(tmp_path / "r.json"), "--dtype", "float32", "--max-variants", "1"])
    variants = bench.load_variants("silu_mul", args, tmp_path)
    wrong = ModuleType("wrong")
    wrong.kernel = lambda gate, up: gate * up  # forgets the silu
    variants.append({"params": {"NUM_WARPS": "0"}, "candidate_id": "wrong", "module": wrong})
    variants.append({"params": {}, "candidate_id": "broken", "error": "load: SyntaxError"})
    entry = bench.run_shape("silu_mul", "tiny", 2, variants, None, args, torch.float32)
    by_id = {r["candidate_id"]: r for r in entry["variants"]}
    assert by_id["wrong"]["ok"] is False and "us" not in by_id["wrong"]
    assert by_id["broken"]["error"].startswith("load")
    assert entry["n_ok"] == 1 and entry["n_failed"] == 2
    assert entry["best"]["candidate_id"] not in ("wrong", "broken")


def test_main_writes_the_json_report(bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pretend to be the GPU box: only the device checks and properties are faked, the run is real
    from types import SimpleNamespace

    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    for knob in ("recompile_limit", "cache_size_limit"):  # main() raises these: restore them afterwards
        if hasattr(torch._dynamo.config, knob):
            monkeypatch.setattr(torch._dynamo.config, knob, getattr(torch._dynamo.config, knob))
    monkeypatch.setattr(bench.torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(name="cpu-interpreter", multi_processor_count=0))
    out = tmp_path / "results" / "triton.json"
    rc = bench.main(["--out", str(out), "--dtype", "float32", "--max-variants", "2", "--rows", "1,5",
                     "--no-compile", "--ops", "rmsnorm,silu_mul"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["gpu"] == "cpu-interpreter" and "--max-variants 2" in report["command"]
    assert [(e["op"], e["rows"]) for e in report["results"]] == [
        ("rmsnorm", 1), ("rmsnorm", 5), ("silu_mul", 1), ("silu_mul", 5)]
    assert all(e["n_ok"] == 2 for e in report["results"]) and report["complete"] is True
    assert sorted(p.name for p in out.parent.iterdir()) == ["triton.json"]
    assert bench.main(["--out", str(out), "--ops", "rope"]) == 2
