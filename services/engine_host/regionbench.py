"""Region-level work inside a worker: a fused candidate for a whole block, checked and timed A/B/A'.

A region's inputs are recorded from real forward passes at the benchmark shapes (a pre-hook on the
first module of the region's type keeps its first call). The candidate is checked against the
module's own forward on every recorded call, then timed against the incumbent (the region kernel
installed now, or the reference forward) with the slots' interleaved timing and A/A spread.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from services.engine_host import outputs
from services.engine_host.capture import at_shape
from services.engine_host.inputs import Shape, clone_args
from services.engine_host.loader import LoadedCandidate, error_line
from services.engine_host.slotbench import ok_result
from services.engine_host.timing import Item, Settings, compare

if TYPE_CHECKING:
    from services.engine_host.runtime import Runtime


def record_calls(rt: Runtime, region: str, shapes: list[Shape]) -> list[tuple[Shape, tuple[Any, ...]]]:
    """(shape, the region module's forward arguments, positional) from one real step at each shape."""
    module = rt.regions.modules(region)[0]
    signature = inspect.signature(type(module).forward)
    calls = []
    for shape in shapes:
        got: list[tuple[Any, ...]] = []

        def hook(mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], got: list = got) -> None:
            if not got:
                bound = signature.bind(mod, *args, **kwargs)
                bound.apply_defaults()
                got.append(clone_args(tuple(bound.arguments.values())[1:]))

        handle = module.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            with torch.inference_mode(), at_shape(rt, shape) as step:
                step()
        finally:
            handle.remove()
        calls.extend((shape, args) for args in got)
    return calls


def benchmark(rt: Runtime, cand: LoadedCandidate, shapes: list[Shape], settings: Settings) -> dict[str, Any]:
    region = cand.slot
    module = rt.regions.modules(region)[0]
    reference = type(module).forward
    installed = rt.regions.kernels[region]
    base: dict[str, Any] = {"incumbent_id": rt.regions.installed[region], "shapes": [s.key for s in shapes]}

    def incumbent(*args: Any) -> Any:
        return installed(module, *args) if installed is not None else reference(module, *args)

    def candidate(*args: Any) -> Any:
        return cand.kernel(module, *args)

    with torch.inference_mode():
        calls = record_calls(rt, region, shapes)
        total = sum(s.weight for s in shapes) or 1.0
        items = [Item(f"{shape.key}:{region}", shape.weight / total,
                      [args] + [clone_args(args) for _ in range(max(rt.spec.input_sets, 1) - 1)])
                 for shape, args in calls]
        for item in items:  # check on every recorded call before any timing
            args = item.inputs[0]
            expected = reference(module, *clone_args(args))
            try:
                got = cand.kernel(module, *clone_args(args))
            except Exception as exc:
                return {**base, "status": "RAISED", "reason": f"raised on {item.key}: {error_line(exc, cand.path)}"}
            why = outputs.mismatch(expected, got)
            if why:
                return {**base, "status": "WRONG_OUTPUT", "reason": f"on {item.key}: {why}"}
            rt.progress(f"checked {item.key}")
        try:
            result = compare(incumbent, candidate, items, rt.timer, settings, rt.progress)
        except Exception as exc:
            return {**base, "status": "RAISED", "reason": f"raised while timed: {error_line(exc, cand.path)}"}
    return ok_result(base, result, len(items))
