"""CUDA memory a dead sandbox held, given back to the harness that shared it.

torch counts every CUDA tensor it sends to another process (one counter in shared memory per send) and
keeps the block allocated while a counter is above zero: the receiver takes its count off when it frees
its copy, or at once when it already holds that storage. A sandbox is SIGKILLed, so it never frees
anything, and every buffer a harness ever sent one stayed allocated (29 GB in a fast-tier harness after
55 candidates on an H100, until the next tier ran out of memory).

So the two sides agree on who holds what: a sandbox keeps every CUDA storage it receives until it dies
(`HeldStorages`; any later send of the same storage is then a cache hit, whose count the receiver
takes off at once), and the harness records, per sandbox, the counter of the first send of each storage
(`SentCounters`), the only ones still counted once the sandbox is gone, and takes them off itself
after the process has exited. A candidate that frees what the sandbox holds only makes its own blocks
stay allocated (their count goes below zero), never another's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing  # registers torch's reducers, which ours wrap
from torch.multiprocessing import reductions

_RECORDING = threading.local()  # .counters: the SentCounters of the send in progress on this thread


class SentCounters:
    """The counters of one sandbox's first receive of each CUDA storage (harness side)."""

    def __init__(self) -> None:
        self._first: dict[tuple[bytes, int], tuple[bytes, int, int]] = {}  # (ipc handle, offset) → counter
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        _RECORDING.counters = self
        try:
            yield
        finally:
            _RECORDING.counters = None

    def note(self, storage_key: tuple[bytes, int], counter: tuple[bytes, int, int]) -> None:
        with self._lock:
            self._first.setdefault(storage_key, counter)

    def release(self) -> None:
        """Take off the counts the (exited) sandbox still held. Only after it has exited: a live one could
        still be reading the blocks."""
        with self._lock:
            counters, self._first = list(self._first.values()), {}
        for handle, offset, device in counters:
            torch.UntypedStorage._release_ipc_counter(handle, offset, device=device)
        if counters:
            torch.cuda.ipc_collect()


def _recording_reduce(tensor: torch.Tensor) -> Any:
    rebuild, args = reductions.reduce_tensor(tensor)
    counters: SentCounters | None = getattr(_RECORDING, "counters", None)
    if counters is not None and rebuild is reductions.rebuild_cuda_tensor:
        device, handle, offset_bytes, counter_handle, counter_offset = args[6], args[7], args[9], args[11], args[12]
        if handle is not None and counter_handle is not None:
            counters.note((handle, offset_bytes), (counter_handle, counter_offset, device))
    return rebuild, args


for _cls in (torch.Tensor, torch.nn.parameter.Parameter):
    ForkingPickler.register(_cls, _recording_reduce)


class HeldStorages:
    """Every CUDA storage a sandbox has received, kept until it dies (sandbox side)."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int], torch.UntypedStorage] = {}

    def keep(self, message: Any) -> None:
        for t in _tensors(message):
            if t.is_cuda:
                storage = t.untyped_storage()
                self._held.setdefault((storage.data_ptr(), storage.nbytes()), storage)


def _tensors(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if depth > 8:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, tuple | list):
        for x in obj:
            yield from _tensors(x, depth + 1)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _tensors(getattr(obj, f.name), depth + 1)
