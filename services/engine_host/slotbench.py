"""Slot-level work inside a worker: quick check + A/B/A' timing of a candidate, and RunSlot.

The quick check runs the candidate once per work item against the reference op on a pristine copy
of the inputs; only a candidate that passes is timed against the incumbent.
"""

from __future__ import annotations

import math
import zlib
from typing import TYPE_CHECKING, Any

import torch

from services.engine_host import outputs
from services.engine_host.inputs import CallSite, Shape, call_sites, clone_args
from services.engine_host.loader import LoadedCandidate, error_line
from services.engine_host.slots import REFERENCES
from services.engine_host.timing import Comparison, Item, Settings, compare

if TYPE_CHECKING:
    from services.engine_host.runtime import Runtime

InputSet = tuple[str, tuple[Any, ...]]  # (input id, slot arguments)


def _generator(rt: Runtime, seed: int) -> torch.Generator:
    return torch.Generator(device=rt.device).manual_seed(seed)


def build_items(rt: Runtime, slot: str, shapes: list[Shape], seed: int) -> list[Item]:
    """Work items weighted by traffic share x calls per step, each with several input sets to rotate."""
    gen = _generator(rt, seed)
    total = sum(s.weight for s in shapes)
    items: list[Item] = []
    for shape in shapes:
        per_set: list[list[CallSite]] = [call_sites(slot, shape, rt.args, gen)]
        per_set += [call_sites(slot, shape, rt.args, gen) for _ in range(_n_sets(rt, per_set[0]) - 1)]
        for j, site in enumerate(per_set[0]):
            items.append(Item(f"{shape.key}:{site.name}", shape.weight / total * site.count,
                              [sites[j].args for sites in per_set]))
    return items


def captured_items(rt: Runtime, slot: str, shape_keys: set[str]) -> list[Item]:
    """Work items from the slot's captured input sets (real forward passes at traffic shapes).

    Each (shape, argument shapes) group is one item weighted by its shape's traffic share; its sets
    are cycled into copies at fresh addresses until rotating through them leaves the L2 behind.
    """
    groups = rt.captured.grouped(slot, shape_keys)
    per_shape: dict[str, int] = {}
    for shape_key, _ in groups:
        per_shape[shape_key] = per_shape.get(shape_key, 0) + 1
    total = sum(rt.captured.weights.get(k, 1.0) for k in per_shape) or 1.0
    items = []
    for i, ((shape_key, _), sets) in enumerate(groups.items()):
        n = max(len(sets), _n_for_bytes(rt, _bytes(sets[0])))
        inputs = list(sets) + [clone_args(sets[j % len(sets)]) for j in range(n - len(sets))]
        weight = rt.captured.weights.get(shape_key, 1.0) / total / per_shape[shape_key]
        items.append(Item(f"captured:{shape_key}:{i}", weight, inputs))
    return items


def _bytes(args: tuple[Any, ...]) -> int:
    return sum(a.nbytes for a in args if isinstance(a, torch.Tensor))


def _n_sets(rt: Runtime, sites: list[CallSite]) -> int:
    return _n_for_bytes(rt, sum(_bytes(site.args) for site in sites))


def _n_for_bytes(rt: Runtime, set_bytes: int) -> int:
    """Enough input sets that rotating through them does not run from the GPU's L2 (3x its size)."""
    if rt.device.type != "cuda":
        return rt.spec.input_sets
    l2 = torch.cuda.get_device_properties(rt.device).L2_cache_size
    return max(rt.spec.input_sets, min(64, math.ceil(3 * l2 / max(set_bytes, 1))))


def benchmark(rt: Runtime, cand: LoadedCandidate, shapes: list[Shape], settings: Settings,
              captured_keys: set[str] | None = None) -> dict[str, Any]:
    """Check, then time against the incumbent on fresh random inputs and (where this tier captured
    them) on the inputs recorded from real forward passes at the traffic shapes `captured_keys`."""
    slot = cand.slot
    incumbent_id = rt.table.installed_id(slot)
    incumbent = rt.table.installed(slot)
    base: dict[str, Any] = {"incumbent_id": incumbent_id, "shapes": [s.key for s in shapes]}
    items = build_items(rt, slot, shapes, seed=zlib.crc32(cand.candidate_id.encode()))
    n_captured = 0
    if captured_keys:
        captured = captured_items(rt, slot, captured_keys)
        n_captured = sum(len(v) for v in rt.captured.grouped(slot, captured_keys).values())
        items += captured
    reference = REFERENCES[slot]
    for item in items:  # quick correctness check before any timing: every captured set, one random set
        for args in (item.inputs if item.key.startswith("captured:") else item.inputs[:1]):
            expected = reference(*clone_args(args))
            try:
                got = cand.kernel(*clone_args(args))
            except Exception as exc:
                return {**base, "status": "RAISED", "reason": f"raised on {item.key}: {error_line(exc, cand.path)}"}
            why = outputs.mismatch(expected, got)
            if why:
                return {**base, "status": "WRONG_OUTPUT", "reason": f"on {item.key}: {why}"}
        rt.progress(f"checked {item.key}")  # a slow first call (torch.compile) is not a hang
    try:
        result = compare(incumbent, cand.kernel, items, rt.timer, settings, rt.progress)
    except Exception as exc:
        return {**base, "status": "RAISED", "reason": f"raised while timed: {error_line(exc, cand.path)}"}
    return ok_result(base, result, n_captured)


def ok_result(base: dict[str, Any], result: Comparison, checked: int) -> dict[str, Any]:
    """A timed comparison as the worker reports it (slots and regions alike)."""
    return {
        **base, "status": "OK", "reason": "",
        "incumbent": vars(result.incumbent), "candidate": vars(result.candidate),
        "aa_spread": result.aa_spread, "speedup": result.speedup,
        "speedup_lo": result.speedup_lo, "speedup_hi": result.speedup_hi, "per_item": result.per_item,
        "per_group": result.per_group, "captured_sets_checked": checked,
    }


def random_sets(rt: Runtime, slot: str, shapes: list[Shape], seed: int) -> list[InputSet]:
    gen = _generator(rt, seed)
    return [(f"random:{shape.key}:{site.name}", site.args)
            for shape in shapes for site in call_sites(slot, shape, rt.args, gen)]


def run_slot(slot: str, cand: LoadedCandidate | None, sets: list[InputSet]) -> dict[str, Any]:
    """Reference on a pristine copy; candidate twice on the same inputs (poisoned memory before each)."""
    reference = REFERENCES[slot]
    runs: list[dict[str, Any]] = []
    status, error = "OK", ""
    for input_id, args in sets:
        expected = reference(*clone_args(args))
        run: dict[str, Any] = {"input_id": input_id, "reference": outputs.encode_output(expected)}
        runs.append(run)
        if cand is None:
            continue
        work, before = clone_args(args), clone_args(args)
        try:
            outputs.poison_like(expected)
            first = cand.kernel(*work)
            run["first"] = outputs.encode_output(first)
            del first
            outputs.poison_like(expected)
            second = cand.kernel(*work)
            run["second"] = outputs.encode_output(second)
        except Exception as exc:
            run["error"] = error_line(exc, cand.path)
            if status == "OK":
                status, error = "RAISED", f"{input_id}: {run['error']}"
        run["inputs_mutated"] = not outputs.same_tensors(before, work)
    return {"status": status, "error": error, "runs": runs}
