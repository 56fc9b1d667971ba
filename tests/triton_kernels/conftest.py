"""Triton candidates on the CPU: the Triton interpreter, switched on before any kernel is decorated.

`triton.jit` picks the interpreter when the decorator runs (TRITON_INTERPRET read then), so setting
the variable here, at import, covers every candidate these tests load. On a machine with a GPU the
variable is left alone so that other folders' GPU tests compile for real; `load_candidate` then sets
it per load (interpreted for the CPU tests, compiled for the @pytest.mark.gpu ones).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import hashlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

Loader = Callable[..., ModuleType]


def load_candidate(source: str, directory: Path, *, interpret: bool = True) -> ModuleType:
    """Import a candidate's source from its own content-addressed file, as the engine host does."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = directory / f"cand_{digest}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"polymorph_candidate_{digest}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        spec.loader.exec_module(module)
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
    return module


@pytest.fixture(scope="session")
def load(tmp_path_factory: pytest.TempPathFactory) -> Loader:
    """load(source, interpret=True) -> module; one import per distinct (source, mode) per session."""
    directory = tmp_path_factory.mktemp("triton_candidates")
    cache: dict[tuple[str, bool], ModuleType] = {}

    def _load(source: str, *, interpret: bool = True) -> ModuleType:
        key = (source, interpret)
        if key not in cache:
            cache[key] = load_candidate(source, directory, interpret=interpret)
        return cache[key]

    return _load
