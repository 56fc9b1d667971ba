"""Device time per slot and region from kernel order alone (the GPU profile's attribution; the
profiler itself runs only on a GPU, the arithmetic here)."""

from __future__ import annotations

import pytest

from services.engine_host.capture import MARKER_KERNEL, DeviceKernel, attribute


def _trace(*items: str | tuple[str, float]) -> list[DeviceKernel]:
    """Markers as "<", kernels as (name, µs), laid one after the other on the stream."""
    out, t = [], 0.0
    for item in items:
        name, us = (MARKER_KERNEL + "(long)", 1.0) if item == "<" else item
        out.append(DeviceKernel(str(name), t, float(us)))
        t += float(us) + 0.5
    return out


def test_kernels_count_for_every_open_name_once_and_markers_never() -> None:
    # layer[ attention[ k1 ] k2 layer[ ... ] ] lm_head: a region around a slot, and a Triton kernel that
    # the profiler could not link to any CPU range still counts for the region it ran inside
    kernels = _trace("<", "<", ("attn", 3.0), "<", ("triton_layer", 10.0), "<", "<", ("gemm", 7.0), "<")
    marks = [(True, "layer"), (True, "attention"), (False, "attention"), (False, "layer"),
             (True, "linear"), (False, "linear")]
    # shuffled input: order comes from the device timestamps
    total, calls = attribute(list(reversed(kernels)), marks)
    assert total == {"layer": 13.0, "attention": 3.0, "linear": 7.0}
    assert calls == {"layer": 1, "attention": 1, "linear": 1}


def test_a_name_nested_in_itself_counts_its_kernels_once() -> None:
    kernels = _trace("<", "<", ("k", 2.0), "<", "<")
    marks = [(True, "layer"), (True, "layer"), (False, "layer"), (False, "layer")]
    total, calls = attribute(kernels, marks)
    assert total == {"layer": 2.0} and calls == {"layer": 2}


def test_markers_that_do_not_match_what_was_launched_are_an_error_not_a_guess() -> None:
    with pytest.raises(RuntimeError, match="marker kernels"):
        attribute(_trace("<", ("k", 1.0)), [(True, "rope"), (False, "rope")])
    with pytest.raises(RuntimeError, match="never opened"):
        attribute(_trace("<", ("k", 1.0), "<"), [(False, "rope"), (True, "rope")])
