"""Work items and the shared buffers their calls run on.

An item is one op at one shape (a call site of random inputs, or a group of captured sets) with its
traffic weight and the harness-private base input sets. `Buffers` is what the item's calls read and
write: every set's arguments live in shared memory (CUDA memory on a GPU) that the harness owns.
Before each sample the harness redraws the fresh (activation) arguments of every set as small
perturbations of the base values (same magnitudes, outliers included, but never the same content
twice, so no cache can hit), poisons the output slabs, and after "done" reads them back. Weights and
other static arguments rotate through enough copies to leave the L2 behind and are checked for
writes after every block of the candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from services.common.slot_specs import OPS
from services.engine_host.capture import CacheState
from services.engine_host.protocol import OutputMeta
from services.engine_host.timing import Item

PERTURB = 0.1  # fresh values: base + PERTURB * std(base) * N(0, 1)
GATHER = 16  # output elements read back from every call's output right after "done"


@dataclass
class WorkItem(Item):
    op: str = ""
    bases: list[tuple[Any, ...]] = field(default_factory=list)  # private: never shared
    caches: CacheState = ()  # the KV state the op reads (regions), restored before its calls
    vocab: int = 0  # integer fresh arguments (token ids) are redrawn below this
    graphed: bool = False  # a decode item: its calls run as CUDA graphs on a GPU (Bind.graphed)


def poison_value(dtype: torch.dtype) -> float | int:
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def is_poison(t: Tensor) -> Tensor:
    if t.dtype.is_floating_point:
        return torch.isnan(t)
    return t == poison_value(t.dtype)


def l2_sets(device: torch.device, set_bytes: int, minimum: int) -> int:
    """Enough copies that rotating through them does not run from the GPU's L2 (3x its size)."""
    if device.type != "cuda":
        return minimum
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    return max(minimum, min(64, math.ceil(3 * l2 / max(set_bytes, 1))))


class Buffers:
    def __init__(self, item: WorkItem, n_sets: int, expect: tuple[OutputMeta, ...], device: torch.device,
                 gen: torch.Generator) -> None:
        self.item, self.n_sets, self.expect, self.device, self.gen = item, n_sets, expect, device, gen
        first = item.bases[0]
        self.fresh = [a for a in OPS[item.op].fresh if a < len(first) and isinstance(first[a], Tensor)]
        nb = len(item.bases)
        static_bytes = sum(t.nbytes for i, t in enumerate(first) if isinstance(t, Tensor) and i not in self.fresh)
        self.n_static = min(n_sets, l2_sets(device, static_bytes, nb))
        # fresh arguments: one private base slab and one shared slab per argument, [n_sets, *shape]
        self.base = {a: torch.stack([item.bases[i % nb][a] for i in range(n_sets)]) for a in self.fresh}
        self.scale = {a: PERTURB * float(b.float().std()) if b.dtype.is_floating_point else 0.0
                      for a, b in self.base.items()}
        self.private = {a: b.clone() for a, b in self.base.items()}
        self.shared = {a: b.clone() for a, b in self.base.items()}
        self.static = [tuple(x.clone() if isinstance(x, Tensor) and j not in self.fresh else x
                             for j, x in enumerate(item.bases[c % nb])) for c in range(self.n_static)]
        self.outputs = tuple(torch.empty((n_sets, *m.shape), dtype=getattr(torch, m.dtype), device=device)
                             for m in expect)
        self.sets = tuple(self._set(i) for i in range(n_sets))
        self.generation = 0  # bumped by the owner when it replaces these buffers

    def _set(self, i: int) -> tuple[Any, ...]:
        static = self.static[i % self.n_static]
        return tuple(self.shared[j][i] if j in self.shared else static[j] for j in range(len(static)))

    def private_args(self, i: int) -> tuple[Any, ...]:
        """Set i as the harness wrote it (the candidate may have scribbled on the shared copy)."""
        base = self.item.bases[(i % self.n_static) % len(self.item.bases)]
        return tuple(self.private[j][i] if j in self.private else base[j] for j in range(len(base)))

    def refresh(self) -> None:
        for a, base in self.base.items():
            if base.dtype.is_floating_point:
                noise = torch.randn(base.shape, generator=self.gen, device=base.device, dtype=torch.float32)
                self.private[a].copy_(base.float() + noise * self.scale[a])
            elif self.item.vocab and base.dtype in (torch.int64, torch.int32):
                self.private[a].copy_(torch.randint(0, self.item.vocab, base.shape, generator=self.gen,
                                                    device=base.device))
            self.shared[a].copy_(self.private[a])

    def poison(self, n: int) -> None:
        """The last write before a call goes out. On a GPU the harness's writes are asynchronous and
        another process's kernels are ordered after them only by this synchronise (else a kernel could
        read the old inputs, or have its outputs overwritten by the poison)."""
        for slab in self.outputs:
            slab[:n].fill_(poison_value(slab.dtype))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def renew(self, n: int) -> None:
        """New inputs and poisoned outputs for the next n calls."""
        self.refresh()
        self.poison(n)

    def gather(self, n: int) -> tuple[Tensor, list[Tensor]]:
        """GATHER random positions of every one of the first n outputs, read now."""
        numel = self.outputs[0][0].numel()
        idx = torch.randint(0, max(numel, 1), (GATHER,), generator=self.gen, device=self.gen.device)
        idx = idx.to(self.device)
        return idx, [slab[:n].reshape(n, -1)[:, idx % max(slab[0].numel(), 1)].clone() for slab in self.outputs]

    def inputs_intact(self, rows: list[int]) -> bool:
        """The fresh arguments of those sets, and every static copy, as the harness wrote them."""
        from services.common.tensors import same_bits

        for a in self.fresh:
            if any(not same_bits(self.shared[a][i], self.private[a][i]) for i in rows):
                return False
        nb = len(self.item.bases)
        for c, copy in enumerate(self.static):
            base = self.item.bases[c % nb]
            for j, x in enumerate(copy):
                if isinstance(x, Tensor) and j not in self.fresh and not same_bits(x, base[j]):
                    return False
        return True
