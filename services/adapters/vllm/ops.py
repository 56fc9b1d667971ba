"""vLLM's RMSNorm, SiluAndMul and RotaryEmbedding, dispatched through the worker's op table.

Registered with `CustomOp.register_oot` (vLLM instantiates these in place of its own classes), each
translates vLLM's call into Polymorph's slot form (services/common/slot_specs.py) and back:
- RMSNorm(x [T,E]) → rmsnorm(x [1,T,E], weight, eps); RMSNorm(x, residual) → add_rmsnorm(x, residual,
  weight, eps), which returns (normed, x + residual) exactly as vLLM's fused form does;
- SiluAndMul(x [T,2I]) → silu_mul(gate, up), the two halves as views;
- RotaryEmbedding(positions, q, k) → rope(x [1,T,H,D], freqs_cis [T,D/2,2]) on q and on k. Polymorph's
  rope rotates interleaved pairs (gpt-fast); a neox-style model's halves are permuted into pairs first
  and back after (two copies each way: the price of serving its kernels; checked like any other).
An op vLLM built with options these slot forms do not cover (no weight, a variance size override,
partial rotary, no key) always runs vLLM's own code. With nothing installed a slot runs vLLM's own
forward untouched (`serves_native`: one counter per call); the slot form is built only while the worker
samples its first inputs (the check's).

register_oot renames the class (its `name` becomes "RMSNorm", not vLLM's "rms_norm"), and vLLM decides
from that name whether an op runs its platform kernel (forward_cpu, forward_cuda: one fused call) or
forward_native (several torch ops): each class asks vLLM's own class instead, so it dispatches exactly
as vLLM would (measured without this: 25 % fewer tokens/s on the CPU, benchmarks/vllm_cpu.py).

Live swaps need the op to be dispatched at run time: under `--enforce-eager` (or compilation mode 0)
every call goes through the table. A compiled model traces the Python dispatch away, so the plugin
says so at start (`dispatch` in the state file) and refuses to swap (settings.py, sidecar.py).
"""

from __future__ import annotations

from typing import Any

import torch

from services.adapters.vllm import worker


def _interleave(d: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Index maps between neox halves (x[i], x[i + d/2]) and interleaved pairs (x[2i], x[2i+1])."""
    half = torch.arange(d // 2, device=device)
    to_pairs = torch.stack((half, half + d // 2), dim=-1).reshape(-1)
    return to_pairs, torch.argsort(to_pairs)


def _as_vllm_decides(cls: Any) -> bool:
    """`CustomOp.enabled` of the vLLM class a stand-in replaces (its direct base): register_oot renamed
    the stand-in, and vLLM's answer under the renamed class is not the one it gives its own op."""
    return bool(cls.__bases__[0].enabled())


def register() -> None:
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot

    if "RMSNorm" in op_registry_oot:  # every vLLM process loads general plugins, some more than once
        return
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
    from vllm.model_executor.layers.rotary_embedding.common import ApplyRotaryEmb

    @CustomOp.register_oot(name="RMSNorm")
    class PolymorphRMSNorm(RMSNorm):
        enabled: Any = classmethod(_as_vllm_decides)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._slot_form = self.has_weight and self.variance_size_override is None
            worker.attach(self)

        def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
            table = worker.table()
            if (table is None or not self._slot_form
                    or table.serves_native("rmsnorm" if residual is None else "add_rmsnorm")):
                return super().forward(x, residual)
            shape = x.shape
            if residual is None:
                def native(x3: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
                    return self._forward_method(x3.reshape(shape)).reshape(x3.shape)

                out = table.call("rmsnorm", native, x.reshape(1, -1, shape[-1]), self.weight.data,
                                 self.variance_epsilon)
                return out.reshape(shape)

            def native_add(x3: torch.Tensor, r3: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
                normed, h = self._forward_method(x3.reshape(shape), r3.reshape(shape))
                return normed.reshape(x3.shape), h.reshape(x3.shape)

            normed, h = table.call("add_rmsnorm", native_add, x.reshape(1, -1, shape[-1]),
                                   residual.reshape(1, -1, shape[-1]), self.weight.data, self.variance_epsilon)
            return normed.reshape(shape), h.reshape(shape)

    @CustomOp.register_oot(name="SiluAndMul")
    class PolymorphSiluAndMul(SiluAndMul):
        enabled: Any = classmethod(_as_vllm_decides)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            worker.attach(self)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            table = worker.table()
            if table is None or table.serves_native("silu_mul"):
                return super().forward(x)
            d = x.shape[-1] // 2
            lead = x.shape[:-1]

            def native(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
                joined = torch.cat((gate, up), dim=-1).reshape(*lead, 2 * d)
                return self._forward_method(joined).reshape(gate.shape)

            x3 = x.reshape(1, -1, 2 * d)
            return table.call("silu_mul", native, x3[..., :d], x3[..., d:]).reshape(*lead, d)

    @CustomOp.register_oot(name="RotaryEmbedding")
    class PolymorphRotaryEmbedding(RotaryEmbedding):
        enabled: Any = classmethod(_as_vllm_decides)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._maps: tuple[torch.Tensor, torch.Tensor] | None = None
            worker.attach(self)

        def forward(self, positions: torch.Tensor, query: torch.Tensor,
                    key: torch.Tensor | None = None) -> Any:
            table = worker.table()
            if (table is None or key is None or self.rotary_dim != self.head_size
                    or getattr(self, "cos_sin_cache", None) is None or table.serves_native("rope", 2)):
                return super().forward(positions, query, key)
            D, neox = self.head_size, self.is_neox_style
            if self._maps is None or self._maps[0].device != query.device:
                self._maps = _interleave(D, query.device)
            to_pairs, to_halves = self._maps
            cos, sin = self.cos_sin_cache.index_select(0, positions.flatten()).chunk(2, dim=-1)
            freqs = torch.stack((cos, sin), dim=-1).float()  # [T, D/2, 2]

            def native(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
                t = x[..., to_halves] if neox else x
                y = ApplyRotaryEmb.forward_static(t[0], freqs_cis[..., 0], freqs_cis[..., 1], neox)
                return (y[..., to_pairs] if neox else y).reshape(x.shape)

            def rotate(t: torch.Tensor) -> torch.Tensor:
                x = t.view(1, t.shape[0], -1, D)
                x = x[..., to_pairs] if neox else x
                y = table.call("rope", native, x, freqs)
                return (y[..., to_halves] if neox else y).reshape(t.shape)

            return rotate(query), rotate(key)
