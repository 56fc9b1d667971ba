"""One op table per vLLM worker process, made when the first Polymorph op is built there (that is
how a process is known to run a model: the API server builds none), with its sidecar started."""

from __future__ import annotations

import threading
from typing import Any

import torch

from services.adapters.vllm.settings import AdapterSettings
from services.adapters.vllm.table import ServingTable

_table: ServingTable | None = None
_lock = threading.Lock()


def table() -> ServingTable | None:
    return _table


def attach(module: Any) -> None:
    _make_table()
    assert _table is not None
    # which of vLLM's forwards each op class runs (forward_cpu, forward_native, ...): the state file says
    _table.methods[type(module).__name__] = getattr(module._forward_method, "__name__", "?")


def _make_table() -> None:
    global _table
    if _table is not None:
        return
    with _lock:
        if _table is not None:
            return
        from services.adapters.vllm.sidecar import Sidecar

        settings = AdapterSettings.from_env()
        fresh = ServingTable()
        Sidecar(fresh, settings, _hardware(settings), _dispatch()).start()
        _table = fresh


def _hardware(settings: AdapterSettings) -> str:
    from vllm.platforms import current_platform

    from services.common.hardware import hardware_name

    return settings.hardware or hardware_name(torch.device(current_platform.device_type))


def _dispatch() -> str:
    """'eager' when every op call runs the table's Python dispatch; 'compiled' when vLLM traces the
    model (the dispatch is traced away: a swap would never be called)."""
    from vllm.config import CompilationMode, get_current_vllm_config_or_none

    config = get_current_vllm_config_or_none()
    if config is None or config.compilation_config.mode == CompilationMode.NONE:
        return "eager"
    return "compiled"
