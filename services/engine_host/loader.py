"""Candidate loader: source text → a content-addressed file → an imported, validated module.

Triton needs a real file (it reads kernel source through inspect), so every candidate is written to
`<kernels_dir>/<hash>.py` and imported under a unique module name. Runs only inside engine workers.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.slot_specs import BACKENDS, REGION_PARAMS, SLOTS, candidate_id


class LoadError(Exception):
    """The candidate did not import, or lacks a valid SLOT / BACKEND / kernel."""


@dataclass(frozen=True)
class LoadedCandidate:
    candidate_id: str
    slot: str
    backend: str
    kernel: Callable[..., Any]
    path: Path



def error_line(exc: BaseException, path: Path | None = None) -> str:
    """`Type: message`, plus where in the candidate file it happened when we can tell."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    line = text[-1] if text else type(exc).__name__
    if path is not None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        if frames:
            line += f" (candidate line {frames[-1].lineno})"
    return line


def _write_once(path: Path, source: str) -> None:
    if path.exists() and path.read_text() == source:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(source)
    os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file


def load_candidate(source: str, slot: str, kernels_dir: Path, cid: str | None = None) -> LoadedCandidate:
    """Write, import and validate a candidate for `slot` (or a region). Raises LoadError with a clear reason."""
    if slot not in SLOTS and slot not in REGION_PARAMS:
        raise LoadError(f"unknown slot {slot!r}; known: {', '.join(SLOTS)}; regions: {', '.join(REGION_PARAMS)}")
    if not source.strip():
        raise LoadError("empty source")
    digest = candidate_id(slot, source)
    path = kernels_dir / f"{digest}.py"
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise LoadError(f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    _write_once(path, source)
    name = f"polymorph_kernel_{digest}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton and dataclasses look modules up by name while importing
        try:
            exec(code, module.__dict__)
        except BaseException as exc:
            sys.modules.pop(name, None)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise LoadError(f"import failed: {error_line(exc, path)}") from exc
    return LoadedCandidate(cid or digest, slot, *_validate(module, slot), path)


def _validate(module: Any, slot: str) -> tuple[str, Callable[..., Any]]:
    word = "REGION" if slot in REGION_PARAMS else "SLOT"
    declared = getattr(module, word, None)
    if declared is None:
        raise LoadError(f"module defines no {word}")
    if declared != slot:
        raise LoadError(f"{word} = {declared!r} but the candidate was proposed for {word.lower()} {slot!r}")
    backend = getattr(module, "BACKEND", None)
    if backend not in BACKENDS:
        raise LoadError(f"BACKEND = {backend!r}; expected one of {', '.join(BACKENDS)}")
    kernel = getattr(module, "kernel", None)
    if kernel is None:
        raise LoadError("module defines no kernel(...)")
    if not callable(kernel):
        raise LoadError(f"kernel is a {type(kernel).__name__}, not callable")
    params = REGION_PARAMS[slot] if slot in REGION_PARAMS else SLOTS[slot].params
    try:
        signature = inspect.signature(kernel)
    except (TypeError, ValueError):  # compiled or C callables may not expose one: calling will tell
        return backend, kernel
    try:
        signature.bind(*params)
    except TypeError as exc:
        raise LoadError(f"kernel{signature} cannot be called as kernel({', '.join(params)}): {exc}") from exc
    return backend, kernel
