"""Stage 1 (static checks): honest kernels pass, each forbidden construct fails with its line number."""

from __future__ import annotations

import pytest

from services.verifier.static_checks import check_source
from tests.verifier.adversarial_cases import DYNAMIC_CASES, HONEST_CASES, HONEST_RMSNORM, STATIC_CASES

HEADER = 'import torch\nimport torch.nn.functional as F\n\nSLOT = "rmsnorm"\nBACKEND = "torch"\n'
# HEADER is 5 lines: a body's first line is line 6.

TRITON_RMSNORM = '''import torch
import triton
import triton.language as tl

SLOT = "rmsnorm"
BACKEND = "triton"


@triton.jit
def _rms(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / N + eps) * tl.load(W + cols, mask=cols < N)
    tl.store(Y + row * N + cols, y, mask=cols < N)


def kernel(x, weight, eps):
    y = torch.empty_like(x)
    n = x.shape[-1]
    _rms[(x.numel() // n,)](x, weight, y, n, eps, BLOCK=triton.next_power_of_2(n))
    return y
'''

COMPILED = '''import torch

SLOT = "silu_mul"
BACKEND = "compile"
_SCALE = {"unused": 1}


def _impl(gate, up):
    out = torch.nn.functional.silu(gate)
    out = out * up
    return out


kernel = torch.compile(_impl, dynamic=True)
'''


K = "def kernel(x, weight, eps):\n"
S = 'SLOT = "rmsnorm"\nBACKEND = "torch"\n'


def findings(body: str, slot: str = "rmsnorm", backend: str = "torch", dtype: str = "float32") -> str:
    return check_source(HEADER + body, slot, backend, dtype).detail()


@pytest.mark.parametrize(("source", "slot", "backend"), [
    (HONEST_RMSNORM, "rmsnorm", "torch"),
    (TRITON_RMSNORM, "rmsnorm", "triton"),
    (COMPILED, "silu_mul", "compile"),
    (HEADER + "def kernel(x, weight, eps, *, scale=1.0):\n    out = x.float()\n    out[..., 0] = 1\n"
     "    return out.to(x.dtype) * weight * scale\n", "rmsnorm", ""),
])
def test_honest_kernels_pass(source: str, slot: str, backend: str) -> None:
    report = check_source(source, slot, backend)
    assert report.passed, report.detail()


@pytest.mark.parametrize("case", STATIC_CASES, ids=lambda c: c.name)
def test_adversarial_static_cases_fail_statically(case) -> None:
    report = check_source(case.source, case.op, "")
    assert not report.passed
    assert report.detail().startswith("line ")


@pytest.mark.parametrize("case", DYNAMIC_CASES + HONEST_CASES, ids=lambda c: c.name)
def test_dynamic_cases_and_honest_rewrites_get_past_static(case) -> None:
    # They must reach the engine stages: the static checks are not what catches them.
    report = check_source(case.source, case.op, "")
    assert report.passed, report.detail()


@pytest.mark.parametrize(("body", "expected"), [
    ("import os\n", "line 6: import of 'os' is forbidden"),
    ("from subprocess import run\n", "line 6: import of 'subprocess' is forbidden"),
    ("import requests_html\n", "line 6: import of 'requests_html' is not allowed"),
    ("from . import sibling\n", "line 6: relative imports are forbidden"),
    ("x = eval('1')\n", "line 6: eval() is forbidden"),
    ("f = open\n", "line 6: open() is forbidden"),
    ("g = compile('1', 'f', 'eval')\n", "line 6: compile() is forbidden"),
    ("m = __import__('os')\n", "line 6: __import__() is forbidden"),
    ("setattr(F, 'silu', None)\n", "line 6: setattr() is forbidden"),
    ("a = getattr(torch, '__dict__')\n", "line 6: getattr of '__dict__' is forbidden"),
    ("b = torch.__dict__\n", "line 6: access to __dict__ is forbidden"),
    ("c = ().__class__.__mro__\n", "line 6: access to __class__ is forbidden"),
    ("e = getattr(torch.cuda, 'Event')\n", "line 6: uses torch.cuda.Event"),
    ("from torch.cuda import Event as E\n", "line 6: uses torch.cuda.Event"),
    (K + "    torch.cuda.synchronize()\n    return x\n", "line 7: uses torch.cuda.synchronize"),
    ("g = torch.cuda.CUDAGraph()\n", "line 6: uses torch.cuda.CUDAGraph"),
    ("torch.set_num_threads(64)\n", "line 6: uses torch.set_num_threads"),
    ("import triton.testing\n", "line 6: uses triton.testing"),
    ("torch.os.system('true')\n", "line 6: reaches 'os' through torch.os: process"),
    ("import typing\nm = typing.sys.modules\n", "line 7: reaches 'sys' through typing.sys:"),
    ("c = torch.cuda\ne = c.Event(enable_timing=True)\n", "line 7: uses torch.cuda.Event"),
    ("c = torch.cuda\nc.synchronize = print\n", "line 7: assigns torch.cuda.synchronize: monkey-patching"),
    ("g = getattr\n", "line 6: getattr passed around"),
    ("import operator\nev = operator.attrgetter('Event')(torch.cuda)\n", "line 7: uses operator.attrgetter"),
    ("lib = torch.library.Library('aten', 'IMPL')\n", "line 6: uses torch.library.Library: overrides torch"),
    ("torch.overrides.TorchFunctionMode().__enter__()\n", "line 6: uses torch.overrides"),
    ("F.rms_norm = None\n", "line 6: assigns torch.nn.functional.rms_norm: monkey-patching"),
    ("torch.backends.cuda.matmul.allow_tf32 = True\n", "line 6: assigns torch.backends.cuda.matmul.allow_tf32"),
    ("torch.set_float32_matmul_precision('medium')\n", "line 6: uses torch.set_float32_matmul_precision"),
    (K + "    with torch.autocast('cpu'):\n        return x\n", "line 7: uses torch.autocast"),
    (K + "    return x.to(torch.bfloat16)\n", "line 7: precision downgrade: casts to bfloat16"),
    (K + "    return x.half()\n", "line 7: precision downgrade: .half()"),
    (K + "    return torch.zeros(3, dtype=torch.float16)\n", "casts to float16"),
    ("_N = []\n" + K + "    _N.append(1)\n    return x\n", "line 8: mutates module-level state '_N'"),
    ("_B = torch.zeros(3)\n" + K + "    _B.copy_(x)\n    return x\n", "line 8: mutates module-level"),
    ("_B = torch.zeros(3)\ndef kernel(x, weight, eps):\n    return torch.mul(x, 2, out=_B)\n",
     "line 8: writes into module-level buffer '_B'"),
    (K + "    kernel.last = x\n    return x\n", "line 7: writes module-level state 'kernel'"),
    ("import itertools\n_C = itertools.count()\ndef kernel(x, weight, eps):\n    next(_C)\n    return x\n",
     "line 9: advances module-level iterator '_C'"),
    ("def kernel(x, weight, eps, _memo={}):\n    return x\n", "line 6: default argument of kernel()"),
    ("import functools\n@functools.lru_cache\ndef _f(n):\n    return n\n", "line 7: @functools.lru_cache caches"),
    ("def _make():\n    seen = {}\n    def k(x, weight, eps):\n        seen[x.shape] = x\n        return x\n"
     "    return k\nkernel = _make()\n", "line 9: writes module-level state 'seen'"),
    ("def _make():\n    n = 0\n    def k(x, weight, eps):\n        nonlocal n\n        return x\n    return k\n",
     "line 9: nonlocal n"),
])
def test_forbidden_constructs_are_flagged_with_their_line(body: str, expected: str) -> None:
    assert expected in findings(body)


def test_precision_rule_follows_the_slot_input_dtype() -> None:
    body = "def kernel(x, weight, eps):\n    return x.to(torch.bfloat16)\n"
    assert "precision downgrade" in findings(body, dtype="float32")
    assert findings(body, dtype="bfloat16") == "no forbidden constructs"
    assert "casts to bfloat16" in findings(body, dtype="float16")  # same bits, less mantissa
    fp8 = "def kernel(x, weight, eps):\n    return x.to(torch.float8_e4m3fn).to(x.dtype)\n"
    assert "casts to float8_e4m3fn" in findings(fp8, dtype="bfloat16")


def test_casting_to_a_small_integer_is_left_to_the_numeric_checks() -> None:
    # a named boolean mask cast to uint8 is honest (argmax of the mask); integer quantisation of values
    # is caught where it matters: outputs outside the tolerance
    mask = 'SLOT = "sample"\nBACKEND = "torch"\nimport torch\n\n\ndef kernel(logits):\n' \
           "    hit = logits == logits.amax(-1, keepdim=True)\n" \
           "    return (hit.to(torch.uint8) + torch.isnan(logits).to(torch.int8)).argmax(-1)\n"
    assert check_source(mask, "sample", "torch").passed
    halved = mask.replace("hit.to(torch.uint8)", "logits.half()")
    assert "line 8: precision downgrade: .half()" in check_source(halved, "sample", "torch").detail()


@pytest.mark.parametrize(("source", "expected"), [
    ("def kernel(x, weight, eps):\n    return x\n", "line 1: module does not define SLOT"),
    ('SLOT = "rmsnorm"\ndef kernel(x, weight, eps):\n    return x\n', "module does not define BACKEND"),
    ('SLOT = "rmsnorm"\nBACKEND = "cuda"\ndef kernel(x, weight, eps):\n    return x\n',
     "line 2: BACKEND = 'cuda' is not one of"),
    (S, "module does not define kernel"),
    (S + 'def kernel(x):\n    return x\n', "line 3: kernel must accept (x, weight, eps)"),
    (S + 'async def kernel(x, weight, eps):\n    return x\n', "not async"),
    ('SLOT = "rms" + "norm"\nBACKEND = "torch"\ndef kernel(x, weight, eps):\n    return x\n',
     "SLOT must be assigned a string literal"),
    (S + 'def kernel(x, weight, eps)\n    return x\n', "line 3: syntax error"),
])
def test_module_structure(source: str, expected: str) -> None:
    assert expected in check_source(source, "rmsnorm", "").detail()


def test_backend_must_match_the_candidate_and_slot_must_be_known() -> None:
    assert "but the candidate says 'triton'" in check_source(HONEST_RMSNORM, "rmsnorm", "triton").detail()
    assert "unknown slot or region 'layernorm'" in check_source(HONEST_RMSNORM, "layernorm", "torch").detail()


def test_locals_shadowing_module_names_are_not_state() -> None:
    body = "out = None\ndef kernel(x, weight, eps):\n    out = torch.empty_like(x)\n    out.copy_(x)\n" \
           "    out[0] = 1\n    return out\n"
    assert findings(body) == "no forbidden constructs"
