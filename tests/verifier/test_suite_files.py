"""The candidate suites as files: every cheat and every honest rewrite is well-formed, and the honest
ones really are honest.

tests/verifier/adversarial/ holds cheating candidates, tests/verifier/honest/ honest rewrites. Each
file starts with three header lines and a docstring:

    # expect: <stage>     the first stage that must fail it with every check on ("pass" if honest)
    # dynamic: <stage>    the stage that must fail it with the static (AST) checks switched off
    # family: <family>    which kind of attack it is ("honest" for the rewrites)
    \"\"\"What it does and why a naive checker would be fooled.\"\"\"

Cheat files are only parsed here, never imported: several patch torch or the engine at import time.
Honest files with the torch backend are imported and run against the slot references on llama-tiny
shapes (decode, prefill on a cached prefix, the largest batch at a long context) with real-model-like
magnitudes (1% outliers at 50x), the tensor kinds the model passes (views of a qkv projection, KV-cache
slices, transposed queries, nn.Parameter weights) and, for `sample`, tied and NaN logits.
"""

from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from services.common.slot_specs import BACKENDS, REGION_PARAMS, REGIONS, SLOTS
from services.engine_host.models.llama import FeedForward, model_args, precompute_freqs_cis
from services.engine_host.ops import OpTable
from services.engine_host.slots import REFERENCES
from tests.verifier.adversarial_cases import (
    ALL_PATHS,
    CANARY,
    CHEAT_PATHS,
    HONEST_PATHS,
    STAGES,
    defines_kernel,
    parse,
    stages,
)

# Families 1-10 of issue 13, each covered by at least MIN_PER_FAMILY files.
REQUIRED_FAMILIES = ("import_patch", "sniffing", "deferred", "state", "size_shortcut", "numerics", "ties",
                     "strides", "rare_corruption", "live_precision")
CHEAT_FAMILIES = (*REQUIRED_FAMILIES, "legacy", "boundary")
MIN_CHEATS, MIN_HONEST, MIN_PER_FAMILY = 48, 22, 2
LEGACY = frozenset({
    "crash_ctypes", "dynamic_getattr", "event_patch", "exec_source", "hang", "input_mutation", "nan_output",
    "partial_write", "precision_bits", "precision_half", "raises", "reexport_escape", "reference_patch",
    "result_reuse_cache", "result_reuse_global", "result_reuse_hidden", "second_call_garbage", "shape_hardcode",
    "side_stream", "swallow_empty", "swallow_zeros", "time_bomb", "timer_patch", "wrong_slot",
})
# llama-tiny (services/engine_host/models/llama.py)
ARGS = model_args("llama-tiny")
E, HQ, HKV, D, FF, V = ARGS.dim, ARGS.n_heads, ARGS.n_kv_heads, ARGS.head_dim, ARGS.intermediate_size, ARGS.vocab_size
EPS = ARGS.norm_eps
REL_TOL = 1e-5


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


# -- every file --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ALL_PATHS, ids=_ids)
def test_every_suite_file_has_a_valid_header_and_compiles(path: Path) -> None:
    f = parse(path)
    compile(path.read_text(), str(path), "exec")  # compiled, never executed
    assert len(f.doc.split()) >= 3, f"{f.name}: say in the docstring what it does and why it would fool a checker"
    if f.honest:
        assert (f.expect, f.dynamic, f.family) == ("pass", "pass", "honest")
        return
    assert stages(f.expect) <= set(STAGES), f"{f.name}: expect {f.expect!r} is not one of {STAGES}"
    assert stages(f.dynamic) <= set(STAGES) - {"static"}, f"{f.name}: dynamic {f.dynamic!r} must be a later stage"
    if f.expect != "static":  # the static checks did not catch it, so switching them off changes nothing
        assert f.dynamic == f.expect, f"{f.name}: expect {f.expect} but dynamic {f.dynamic}"
    assert f.family in CHEAT_FAMILIES, f"{f.name}: family {f.family!r} is not one of {CHEAT_FAMILIES}"
    assert (f.family == "legacy") == (f.name in LEGACY), f"{f.name}: 'legacy' is the family of the original 24"


@pytest.mark.parametrize("path", ALL_PATHS, ids=_ids)
def test_every_suite_file_declares_a_known_slot_or_region_a_backend_and_a_kernel(path: Path) -> None:
    f = parse(path)
    tree = ast.parse(path.read_text())
    assert (f.slot is None) != (f.region is None), f"{f.name}: declare exactly one of SLOT and REGION"
    assert f.slot in SLOTS if f.slot is not None else f.region in REGIONS
    assert f.backend in BACKENDS, f"{f.name}: BACKEND {f.backend!r} is not one of {BACKENDS}"
    assert defines_kernel(tree), f"{f.name}: no top-level kernel"
    if f.kernel_params is not None and (f.honest or f.expect not in ("static", "load")):
        wanted = SLOTS[f.slot].params if f.slot is not None else REGION_PARAMS[f.region]
        assert f.kernel_params == wanted, f"{f.name}: kernel{f.kernel_params} but the contract is {wanted}"


def test_the_suites_are_large_enough_and_cover_every_family() -> None:
    cheats, honest = [parse(p) for p in CHEAT_PATHS], [parse(p) for p in HONEST_PATHS]
    assert len(cheats) >= MIN_CHEATS and len(honest) >= MIN_HONEST, (len(cheats), len(honest))
    assert {f.name for f in cheats} >= LEGACY, "the original adversarial files are kept"
    per_family = {family: sum(f.family == family for f in cheats) for family in CHEAT_FAMILIES}
    thin = {family: n for family, n in per_family.items() if family in REQUIRED_FAMILIES and n < MIN_PER_FAMILY}
    assert not thin, f"families with fewer than {MIN_PER_FAMILY} cheats: {thin}"
    assert sum(f.backend == "triton" for f in cheats + honest) <= 2, "Triton runs only interpreted on the CPU"
    assert sum(f.backend == "compile" for f in cheats + honest) <= 1, "each compile candidate costs ~20 s"
    assert any(f.region for f in cheats) and any(f.region for f in honest), "region candidates in both suites"


def test_no_candidate_has_written_into_the_repository() -> None:
    # boundary_write_repo_canary.py writes here instead of services/ when nothing stops it reaching the repo
    assert not CANARY.exists(), f"a candidate escaped its sandbox and wrote {sorted(CANARY.iterdir())}"


# -- honest files, run in this process -------------------------------------------------------
def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"polymorph_honest_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _act(gen: torch.Generator, *shape: int, scale: float = 1.0, outliers: bool = False) -> Tensor:
    t = torch.randn(shape, generator=gen) * scale
    if outliers:  # 1% of the elements 50x larger, as in real activations
        spikes = torch.rand(shape, generator=gen) < 0.01
        t = torch.where(spikes, t * 50.0, t)
    return t


def _weight(gen: torch.Generator, n: int, k: int) -> Tensor:
    return nn.Parameter(torch.randn(n, k, generator=gen) / math.sqrt(k), requires_grad=False)


def _mask(s: int, t: int) -> Tensor:
    rows = torch.arange(t - s, t)[:, None]
    return (torch.arange(t)[None, :] <= rows)[None, None]  # [1,1,S,T] causal


# (batch, new tokens, context): decode, prefill after a cached prefix, largest batch at a long context
SHAPES = ((3, 1, 37), (2, 33, 40), (8, 1, 300))
FREQS = precompute_freqs_cis(ARGS.max_seq_len, D, ARGS.rope_base)


def slot_inputs(slot: str, b: int, s: int, t: int, gen: torch.Generator, outliers: bool) -> tuple[Any, ...]:
    """Arguments for one call, in the tensor kinds the model passes."""
    norm_w = nn.Parameter(torch.randn(E, generator=gen) * 0.1 + 1.0, requires_grad=False)
    if slot == "rmsnorm":
        return (_act(gen, b, s, E, scale=2.0, outliers=outliers), norm_w, EPS)
    if slot == "add_rmsnorm":
        return (_act(gen, b, s, E, outliers=outliers), _act(gen, b, s, E, scale=2.0), norm_w, EPS)
    if slot == "rope":
        qkv = _act(gen, b, s, (HQ + 2 * HKV) * D, outliers=outliers)
        return (qkv[..., : HQ * D].view(b, s, HQ, D), FREQS[t - s: t])  # a strided view, as in Attention
    if slot == "attention":
        q = _act(gen, b, s, HQ, D, outliers=outliers).transpose(1, 2)  # [B,Hq,S,D] transposed view
        cache_k, cache_v = _act(gen, b, HKV, 512, D, outliers=outliers), _act(gen, b, HKV, 512, D)
        return (q, cache_k[:, :, :t], cache_v[:, :, :t], _mask(s, t))  # K/V: slices of the KV cache
    if slot == "silu_mul":
        return (_act(gen, b, s, FF, scale=2.0, outliers=outliers), _act(gen, b, s, FF))
    if slot == "linear":
        return (_act(gen, b, s, E, outliers=outliers), _weight(gen, ARGS.qkv_dim, E))
    if slot == "sample":
        logits = _act(gen, b, V, scale=ARGS.logit_scale, outliers=outliers)
        logits = torch.round(logits)  # many ties at every value
        logits[:, [17, 900, 1901]] = logits.amax(dim=-1, keepdim=True) + 1.0  # a three-way tie at the max
        if b > 1:
            logits[1, 1000:] = float("-inf")
            logits[-1, [5, 700]] = float("nan")  # NaN wins, the first one
        return (logits,)
    raise KeyError(slot)


def assert_contract(out: Any, ref: Any, inputs: tuple[Any, ...], where: str) -> None:
    outs, refs = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    assert isinstance(outs, tuple) and len(outs) == len(refs), f"{where}: returns {type(out).__name__}"
    pointers = {a.data_ptr() for a in inputs if isinstance(a, Tensor)}
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        at = f"{where} output {i}"
        assert type(o) is Tensor, f"{at}: a {type(o).__name__}, not a plain torch.Tensor"
        assert (o.dtype, o.shape, o.device) == (r.dtype, r.shape, r.device), f"{at}: {o.dtype} {tuple(o.shape)}"
        assert o.is_contiguous() and o.storage_offset() == 0, f"{at}: strides {o.stride()} offset {o.storage_offset()}"
        assert o.untyped_storage().nbytes() == o.numel() * o.element_size(), f"{at}: a view into a larger buffer"
        assert o.data_ptr() not in pointers, f"{at}: returns (a view of) an input"
        if not r.dtype.is_floating_point:
            assert torch.equal(o, r), f"{at}: {o.tolist()} != {r.tolist()}"
            continue
        assert torch.equal(o.isnan(), r.isnan()), f"{at}: NaN where the reference has none, or the reverse"
        ok = ~r.isnan()
        err = (o[ok] - r[ok]).abs().max().item() if ok.any() else 0.0
        scale = r[ok].abs().max().item() if ok.any() else 1.0
        assert err <= REL_TOL * max(scale, 1e-30), f"{at}: max error {err:.3g} relative {err / scale:.3g}"


def _snapshot(args: tuple[Any, ...]) -> list[Any]:
    return [(a.clone(), a.stride()) if isinstance(a, Tensor) else a for a in args]


def _assert_unchanged(args: tuple[Any, ...], before: list[Any], where: str) -> None:
    for i, (a, b) in enumerate(zip(args, before, strict=True)):
        if isinstance(a, Tensor):
            same = torch.equal(a.isnan(), b[0].isnan()) and torch.equal(a.nan_to_num(), b[0].nan_to_num())
            assert same, f"{where}: input {i} was modified"
            assert a.stride() == b[1], f"{where}: input {i} was restrided"


TORCH_HONEST = [p for p in HONEST_PATHS if parse(p).backend == "torch"]


@pytest.mark.parametrize("path", [p for p in TORCH_HONEST if parse(p).slot], ids=_ids)
def test_honest_slot_rewrites_match_the_reference(path: Path) -> None:
    f = parse(path)
    assert f.slot is not None
    kernel = _load(path).kernel
    reference = REFERENCES[f.slot]
    gen = torch.Generator().manual_seed(1234)
    for b, s, t in SHAPES:
        for outliers in (False, True):
            args = slot_inputs(f.slot, b, s, t, gen, outliers)
            before = _snapshot(args)
            where = f"{f.name} at B={b} S={s} T={t}{' with outliers' if outliers else ''}"
            with torch.inference_mode():
                out = kernel(*args)
                ref = reference(*[x[0] if isinstance(x, tuple) else x for x in before])
            _assert_unchanged(args, before, where)
            assert_contract(out, ref, args, where)


@pytest.mark.parametrize("path", [p for p in TORCH_HONEST if parse(p).region], ids=_ids)
def test_honest_region_rewrites_match_the_module(path: Path) -> None:
    f = parse(path)
    assert f.region == "mlp_block", "only mlp_block regions are exercised here"
    kernel = _load(path).kernel
    module = FeedForward(ARGS, OpTable())
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.size(1)))
    for b, s, _ in SHAPES:
        for outliers in (False, True):
            x = _act(gen, b, s, E, outliers=outliers)
            before = _snapshot((x,))
            where = f"{f.name} at B={b} S={s}{' with outliers' if outliers else ''}"
            with torch.inference_mode():
                out = kernel(module, x)
                ref = module(before[0][0])
            _assert_unchanged((x,), before, where)
            assert_contract(out, ref, (x, *module.parameters()), where)
