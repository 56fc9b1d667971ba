"""Every library template computes its slot's function: odd shapes, float32 and bfloat16, inputs intact."""

from __future__ import annotations

import ast
import math
import types

import pytest
import torch

from services.agent_pool import library
from services.agent_pool.library import Config
from services.common.slot_specs import SLOTS

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}


def _load(config: Config) -> types.ModuleType:
    module = types.ModuleType(f"cand_{config.slot}")
    exec(compile(config.source, f"<{config.slot}>", "exec"), module.__dict__)
    return module


def _fn(config: Config):
    module = _load(config)
    assert config.slot == module.SLOT and config.backend == module.BACKEND
    # a compiled variant compiles lazily on its first call (~20-45 s on this CPU): the wrapped
    # function is the exact computation, so check that and that `kernel` wraps it
    if config.backend == "compile":
        assert getattr(module.kernel, "_torchdynamo_orig_callable", None) is module._impl
        return module._impl
    return module.kernel


def _inputs(slot: str, dtype: torch.dtype, decode: bool, gen: torch.Generator) -> tuple:
    def rn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    b, s = (2, 1) if decode else (3, 5)
    if slot == "rmsnorm":
        return rn(b, s, 67), rn(67), 1e-5
    if slot == "add_rmsnorm":
        return rn(b, s, 67), rn(b, s, 67), rn(67), 1e-6
    if slot == "silu_mul":
        return rn(b, s, 43) * 3, rn(b, s, 43)
    if slot == "rope":
        angles = torch.rand(s, 5, generator=gen) * 6.3
        return rn(b, s, 3, 10), torch.stack((angles.cos(), angles.sin()), dim=-1)
    if slot == "attention":
        t = 9 if decode else 7
        q, k, v = rn(b, 6, s, 10), rn(b, 2, t, 10), rn(b, 2, t, 10)
        if decode:
            mask = torch.rand(b, 1, s, t, generator=gen) > 0.3
            mask[..., 0] = True  # never a fully masked row
        else:
            mask = torch.ones(s, t, dtype=torch.bool).tril(t - s)[None, None]
        return q, k, v, mask
    if slot == "linear":
        return rn(b, s, 37), rn(29, 37)
    if slot == "sample":
        logits = rn(b, 101)
        logits[:, 17] = logits[:, 90] = logits.max() + 1  # a tie: the lower index must win
        return (logits,)
    raise AssertionError(slot)


def _reference(slot: str, args: tuple):
    """Plain float64 definitions of each slot, cast to the input dtype."""
    d = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    if slot == "rmsnorm":
        x, w, eps = d
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    if slot == "add_rmsnorm":
        x, r, w, eps = d
        h = x + r
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w, h
    if slot == "silu_mul":
        return torch.nn.functional.silu(d[0]) * d[1]
    if slot == "rope":
        x, f = d
        xs = x.reshape(*x.shape[:-1], -1, 2)
        c, s = f[..., 0][None, :, None], f[..., 1][None, :, None]
        return torch.stack((xs[..., 0] * c - xs[..., 1] * s, xs[..., 1] * c + xs[..., 0] * s), -1).flatten(3)
    if slot == "attention":
        q, k, v, mask = d
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
        return scores.softmax(-1) @ v
    if slot == "linear":
        return d[0] @ d[1].T
    if slot == "sample":
        return args[0].argmax(-1)
    raise AssertionError(slot)


def _close(got: torch.Tensor, want: torch.Tensor, like: torch.Tensor) -> None:
    assert got.shape == want.shape
    if want.dtype == torch.int64:
        assert got.dtype == torch.int64 and torch.equal(got, want)
        return
    assert got.dtype == like.dtype
    tol = TOL[like.dtype]
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("slot", library.SLOTS)
def test_every_config_computes_the_slot(slot: str) -> None:
    gen = torch.Generator().manual_seed(7)
    for config in library.space(slot):
        fn = _fn(config)
        for dtype in (torch.float32, torch.bfloat16):
            for decode in (False, True):
                args = _inputs(slot, dtype, decode, gen)
                pristine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
                got = fn(*args)
                want = _reference(slot, args)
                if slot == "add_rmsnorm":
                    _close(got[0], want[0], args[0])
                    _close(got[1], want[1], args[0])
                else:
                    _close(got, want, args[0])
                for before, after in zip(pristine, args, strict=True):
                    if isinstance(before, torch.Tensor):
                        assert torch.equal(before, after), f"{config.params}: mutated an input"


def test_sources_are_distinct_modules_with_the_slot_signature() -> None:
    for slot in library.SLOTS:
        configs = library.space(slot)
        ids = {library.candidate_id(slot, c.source) for c in configs}
        assert len(ids) == len(configs) >= 8, slot
        for config in configs:
            tree = ast.parse(config.source)
            fn = "_impl" if config.backend == "compile" else "kernel"
            defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == fn]
            assert [a.arg for a in defs[0].args.args] == list(SLOTS[slot].params)
    # the grid is real: many variants per slot and compiled ones are a minority of the space
    assert len(library.space("rmsnorm")) >= 60 and len(library.space("attention")) >= 40
    assert len(library.space("rope")) >= 12 and len(library.space("silu_mul")) >= 30


def test_render_rejects_unknown_choices() -> None:
    with pytest.raises(ValueError, match="not in"):
        library.render("rmsnorm", {"form": "magic"})
    with pytest.raises(ValueError, match="unknown"):
        library.render("rope", {"tile": "8"})
    with pytest.raises(ValueError, match="invalid"):
        library.render("rope", {"layout": "complex", "acc": "native"})
