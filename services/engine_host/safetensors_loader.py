"""Load real checkpoints (safetensors) into the zoo's Llama, for users who have them.

The format is simple enough to read without the `safetensors` package: 8 bytes little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}}, then raw little-endian tensor bytes. The
file is memory-mapped and each tensor is copied straight into the parameter it fills (on the GPU
when the model lives there), so no second full copy of the weights sits in host memory.

Names: our own (`layers.0.attention.wqkv`, as `save_file(model.state_dict())` writes them) or
Hugging Face Llama names (`model.layers.0.self_attn.q_proj.weight`, ...). HF q/k projections are
stored for rotate-half rotary embeddings; ours rotates interleaved pairs, so they are permuted back
the way gpt-fast's converter does, and q, k, v are concatenated into wqkv.
"""

from __future__ import annotations

import json
import mmap
import re
import struct
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

DTYPES: dict[str, torch.dtype] = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}
CODES = {v: k for k, v in DTYPES.items()}


class CheckpointError(ValueError):
    """The file is not a safetensors checkpoint that fits this model."""


def save_file(tensors: dict[str, Tensor], path: str | Path) -> None:
    """Write tensors as safetensors (contiguous CPU copies, little-endian)."""
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format aligns the data to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for raw in blobs:
            f.write(raw)


class SafeTensors:
    """A memory-mapped safetensors file; `get(name)` is a zero-copy CPU view of one tensor."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        try:
            (n,) = struct.unpack("<Q", self._file.read(8))
            if n <= 0 or n > 100_000_000:
                raise CheckpointError(f"{self.path}: implausible header length {n}")
            self.header: dict[str, Any] = json.loads(self._file.read(n))
        except (struct.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._file.close()
            raise CheckpointError(f"{self.path}: not a safetensors file ({exc})") from exc
        self.header.pop("__metadata__", None)
        self._base = 8 + n
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def keys(self) -> list[str]:
        return list(self.header)

    def get(self, name: str) -> Tensor:
        meta = self.header[name]
        if meta["dtype"] not in DTYPES:
            raise CheckpointError(f"{name}: unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        if end == start:
            return torch.empty(meta["shape"], dtype=DTYPES[meta["dtype"]])
        with warnings.catch_warnings():  # read-only map: we only ever copy out of it
            warnings.simplefilter("ignore")
            flat = torch.frombuffer(self._map, dtype=torch.uint8, count=end - start, offset=self._base + start)
        return flat.view(DTYPES[meta["dtype"]]).reshape(meta["shape"])

    def close(self) -> None:
        self._map.close()
        self._file.close()


_HF = [
    (re.compile(r"^model\.embed_tokens\.weight$"), "tok_embeddings"),
    (re.compile(r"^model\.norm\.weight$"), "norm"),
    (re.compile(r"^lm_head\.weight$"), "output"),
    (re.compile(r"^model\.layers\.(\d+)\.self_attn\.o_proj\.weight$"), "layers.{}.attention.wo"),
    (re.compile(r"^model\.layers\.(\d+)\.mlp\.gate_proj\.weight$"), "layers.{}.feed_forward.w1"),
    (re.compile(r"^model\.layers\.(\d+)\.mlp\.up_proj\.weight$"), "layers.{}.feed_forward.w3"),
    (re.compile(r"^model\.layers\.(\d+)\.mlp\.down_proj\.weight$"), "layers.{}.feed_forward.w2"),
    (re.compile(r"^model\.layers\.(\d+)\.input_layernorm\.weight$"), "layers.{}.attention_norm"),
    (re.compile(r"^model\.layers\.(\d+)\.post_attention_layernorm\.weight$"), "layers.{}.ffn_norm"),
]
_HF_QKV = re.compile(r"^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.weight$")


def hf_unpermute(w: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """HF's rotate-half layout of a q/k projection → interleaved pairs (per head: [D/2,2] ← [2,D/2])."""
    return w.view(n_heads, 2, head_dim // 2, -1).transpose(1, 2).reshape(n_heads * head_dim, -1)


def hf_permute(w: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """The inverse of hf_unpermute (what HF's converter does to Meta weights); for tests and export."""
    return w.view(n_heads, head_dim // 2, 2, -1).transpose(1, 2).reshape(n_heads * head_dim, -1)


def _our_tensors(st: SafeTensors, args: Any) -> dict[str, Tensor]:
    names = st.keys()
    if not any(n.startswith("model.") or n == "lm_head.weight" for n in names):
        return {n: st.get(n) for n in names}
    out: dict[str, Tensor] = {}
    qkv: dict[str, dict[str, Tensor]] = {}
    for name in names:
        m = _HF_QKV.match(name)
        if m:
            qkv.setdefault(m.group(1), {})[m.group(2)] = st.get(name)
            continue
        for pattern, ours in _HF:
            hit = pattern.match(name)
            if hit:
                out[ours.format(*hit.groups())] = st.get(name)
                break
    for layer, parts in qkv.items():
        if set(parts) != {"q", "k", "v"}:
            raise CheckpointError(f"layer {layer}: q/k/v projections incomplete ({sorted(parts)})")
        q = hf_unpermute(parts["q"], args.n_heads, args.head_dim)
        k = hf_unpermute(parts["k"], args.n_kv_heads, args.head_dim)
        out[f"layers.{layer}.attention.wqkv"] = torch.cat([q, k, parts["v"]])
    if "output" not in out and "tok_embeddings" in out:  # tied embeddings (Llama 3.2 1B)
        out["output"] = out["tok_embeddings"]
    return out


@torch.no_grad()
def load_into(model: Any, path: str | Path, *, strict: bool = True) -> list[str]:
    """Copy a checkpoint's tensors into the model's parameters (cast to their dtype and device).

    Layers beyond the model's (a fast tier loads a few) are skipped; returns the names it filled.
    Raises CheckpointError on a shape mismatch, or (strict) on a parameter the file lacks.
    """
    st = SafeTensors(path)
    try:
        tensors = _our_tensors(st, model.args)
        params = dict(model.named_parameters())
        filled = []
        for name, t in tensors.items():
            if name not in params:
                m = re.match(r"^layers\.(\d+)\.", name)
                if m and int(m.group(1)) >= model.args.n_layers:
                    continue
                if strict:
                    raise CheckpointError(f"unexpected tensor {name!r} for {model.args.name}")
                continue
            p = params[name]
            if tuple(t.shape) != tuple(p.shape):
                raise CheckpointError(f"{name}: checkpoint shape {tuple(t.shape)} != model {tuple(p.shape)}")
            p.copy_(t)  # casts and moves in one go: no second full-size copy on the device
            filled.append(name)
        missing = sorted(set(params) - set(filled))
        if strict and missing:
            raise CheckpointError(f"checkpoint lacks {len(missing)} parameters, e.g. {missing[:3]}")
        return filled
    finally:
        st.close()


_OURS_TO_HF = {
    "tok_embeddings": "model.embed_tokens.weight", "norm": "model.norm.weight", "output": "lm_head.weight",
    "attention.wo": "self_attn.o_proj.weight", "feed_forward.w1": "mlp.gate_proj.weight",
    "feed_forward.w3": "mlp.up_proj.weight", "feed_forward.w2": "mlp.down_proj.weight",
    "attention_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
}


@torch.no_grad()
def export_hf(model: Any, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write a zoo model as a Hugging Face Llama checkpoint (config.json, model.safetensors; q/k in
    HF's rotate-half layout), so a serving stack such as vLLM serves the very function Polymorph tunes
    under the model's name. The tokenizer is the user's (or a test's) to add."""
    a, out = model.args, Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Tensor] = {}
    for name, p in model.named_parameters():
        m = re.match(r"^layers\.(\d+)\.(.+)$", name)
        if m is None:
            tensors[_OURS_TO_HF[name]] = p.to(dtype)
            continue
        rest, pre = m.group(2), f"model.layers.{m.group(1)}."
        if rest == "attention.wqkv":
            q, k, v = p.split([a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim, a.n_kv_heads * a.head_dim])
            tensors[pre + "self_attn.q_proj.weight"] = hf_permute(q, a.n_heads, a.head_dim).to(dtype)
            tensors[pre + "self_attn.k_proj.weight"] = hf_permute(k, a.n_kv_heads, a.head_dim).to(dtype)
            tensors[pre + "self_attn.v_proj.weight"] = v.to(dtype)
        else:
            tensors[pre + _OURS_TO_HF[rest]] = p.to(dtype)
    save_file(tensors, out / "model.safetensors")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.dim,
        "intermediate_size": a.intermediate_size, "num_hidden_layers": a.n_layers,
        "num_attention_heads": a.n_heads, "num_key_value_heads": a.n_kv_heads, "head_dim": a.head_dim,
        "hidden_act": "silu", "max_position_embeddings": a.max_seq_len, "rms_norm_eps": a.norm_eps,
        "rope_theta": a.rope_base, "vocab_size": a.vocab_size, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": str(dtype).removeprefix("torch."),
        "bos_token_id": 1, "eos_token_id": 2,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out
