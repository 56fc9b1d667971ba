"""The variant grid: distinct, self-contained sources; each one loads, matches its slot and computes."""

from __future__ import annotations

import ast
import hashlib
import inspect
from collections import Counter

import pytest
import torch

from services.agent_pool.library.triton import TEMPLATES, candidates, defaults, render
from services.common.slot_specs import REGION_PARAMS, SLOTS
from tests.triton_kernels import reference
from tests.triton_kernels.conftest import Loader


def _candidate_id(slot: str, source: str) -> str:
    return hashlib.sha256(f"{slot}\n{source}".encode()).hexdigest()[:16]


def test_grid_has_distinct_variants_for_every_slot() -> None:
    cands = candidates()
    per_slot = Counter(slot for slot, _, _ in cands)
    assert set(per_slot) == set(TEMPLATES) >= {"rmsnorm", "add_rmsnorm", "silu_mul", "attention", "linear", "sample"}
    assert set(TEMPLATES) <= set(SLOTS) | set(REGION_PARAMS)
    assert len({_candidate_id(slot, src) for slot, src, _ in cands}) == len(cands) >= 20
    assert min(per_slot.values()) >= 6
    for slot, source, params in cands:
        assert params and set(params) <= set(defaults(slot))
        for name, value in params.items():  # the rendered text really carries the params
            assert f"\n{name} = {value}" in source
    assert candidates(("silu_mul",)) == [c for c in cands if c[0] == "silu_mul"]


def test_sources_import_nothing_from_the_repository() -> None:
    for slot, source, _ in candidates():
        tree = ast.parse(source)
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        froms = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        roots |= {n.module.split(".")[0] if n.module else "." for n in froms}
        assert roots <= {"torch", "triton"}, (slot, roots)


def test_every_variant_loads_and_matches_its_slot(load: Loader) -> None:
    for slot, source, _ in candidates():
        mod = load(source)
        region = slot in REGION_PARAMS
        declared = (mod.REGION if region else mod.SLOT, mod.BACKEND)
        assert declared == (slot, "triton")
        params = REGION_PARAMS[slot] if region else SLOTS[slot].params
        assert tuple(inspect.signature(mod.kernel).parameters) == params


def _tiny_check(slot: str, mod) -> None:
    torch.manual_seed(0)
    x, r = torch.randn(5, 200), torch.randn(5, 200)
    w = torch.randn(200)
    if slot == "rmsnorm":
        torch.testing.assert_close(mod.kernel(x, w, 1e-6), reference.rmsnorm(x, w, 1e-6))
    elif slot == "add_rmsnorm":
        for got, want in zip(mod.kernel(x, r, w, 1e-6), reference.add_rmsnorm(x, r, w, 1e-6), strict=True):
            torch.testing.assert_close(got, want)
    else:
        torch.testing.assert_close(mod.kernel(x, r), reference.silu_mul(x, r))


def test_every_variant_computes_on_a_tiny_shape(load: Loader) -> None:
    # float32, 5 x 200: cheap under the interpreter, and it runs each variant's own launch path (the
    # decode kernels' grids are run by their own test files: test_gemv.py, test_decode_attention.py, ...)
    for slot, source, params in candidates(("rmsnorm", "add_rmsnorm", "silu_mul")):
        try:
            _tiny_check(slot, load(source))
        except AssertionError as e:
            raise AssertionError(f"{slot} {params}: {e}") from e


def test_render_rejects_unknown_names_and_non_integer_values() -> None:
    with pytest.raises(ValueError, match="unknown launch parameters"):
        render("rmsnorm", {"BLOCK_I": "64"})
    with pytest.raises(ValueError, match="integer literal"):
        render("silu_mul", {"NUM_WARPS": "4\nimport os"})
    with pytest.raises(KeyError):
        render("step", {})
    assert render("rmsnorm", {}) == render("rmsnorm", defaults("rmsnorm"))


@pytest.mark.parametrize(
    "slot,params,message",
    [
        ("rmsnorm", {"NUM_WARPS": "3"}, "NUM_WARPS"),
        ("add_rmsnorm", {"ROWS_PER_PROGRAM": "0"}, "ROWS_PER_PROGRAM"),
        ("rmsnorm", {"BLOCK_E": "100"}, "BLOCK_E"),
        ("silu_mul", {"BLOCK_I": "65536", "ROWS_PER_PROGRAM": "2"}, "BLOCK_I"),
        ("rope", {"BLOCK_H": "3"}, "BLOCK_H"),
    ],
)
def test_a_malformed_variant_fails_at_load_with_a_clear_error(
    load: Loader, slot: str, params: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        load(render(slot, params))
