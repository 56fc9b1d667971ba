"""The candidate loader: content-addressed files, clear LOAD_ERROR reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.engine_host.loader import LoadError, candidate_id, load_candidate
from tests.engine_host.candidates import RMSNORM_FAST, source


def test_loads_into_a_content_addressed_file(tmp_path: Path) -> None:
    src = source("rmsnorm", RMSNORM_FAST)
    loaded = load_candidate(src, "rmsnorm", tmp_path)
    assert loaded.path == tmp_path / f"{candidate_id('rmsnorm', src)}.py"
    assert loaded.path.read_text() == src
    assert loaded.backend == "torch" and callable(loaded.kernel)
    assert load_candidate(src, "rmsnorm", tmp_path).kernel is loaded.kernel  # imported once


@pytest.mark.parametrize(
    ("text", "slot", "reason"),
    [
        ("def kernel(:\n", "rmsnorm", "syntax error at line 1"),
        ("BACKEND = 'torch'\ndef kernel(x, weight, eps): return x\n", "rmsnorm", "no SLOT"),
        ("SLOT = 'rope'\nBACKEND = 'torch'\ndef kernel(x, weight, eps): return x\n", "rmsnorm",
         "SLOT = 'rope' but the candidate was proposed for slot 'rmsnorm'"),
        ("SLOT = 'rmsnorm'\nBACKEND = 'cuda'\ndef kernel(x, weight, eps): return x\n", "rmsnorm", "BACKEND = 'cuda'"),
        ("SLOT = 'rmsnorm'\nBACKEND = 'torch'\n", "rmsnorm", "no kernel"),
        ("SLOT = 'rmsnorm'\nBACKEND = 'torch'\nkernel = 3\n", "rmsnorm", "not callable"),
        ("SLOT = 'rmsnorm'\nBACKEND = 'torch'\ndef kernel(x): return x\n", "rmsnorm", "cannot be called as"),
        ("import not_a_module_anywhere\n", "rmsnorm", "import failed: ModuleNotFoundError"),
        ("SLOT = 'rmsnorm'\nBACKEND = 'torch'\nraise ValueError('boom')\n", "rmsnorm",
         "import failed: ValueError: boom (candidate line 3)"),
        ("SLOT = 'x'\n", "no_such_slot", "unknown slot"),
        ("   \n", "rmsnorm", "empty source"),
    ],
)
def test_load_errors_say_why(tmp_path: Path, text: str, slot: str, reason: str) -> None:
    with pytest.raises(LoadError, match=None) as info:
        load_candidate(text, slot, tmp_path)
    assert reason in str(info.value)
