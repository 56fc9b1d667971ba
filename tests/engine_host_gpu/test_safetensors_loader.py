from __future__ import annotations

import pytest
import torch

from services.engine_host.models.llama import build_model, model_args
from services.engine_host.ops import OpTable
from services.engine_host.safetensors_loader import (
    CheckpointError,
    SafeTensors,
    export_hf,
    hf_permute,
    hf_unpermute,
    load_into,
    save_file,
)


def _model(seed: int, layers: int | None = None):
    return build_model(model_args("llama-tiny", layers), OpTable(), seed=seed, device="cpu", max_batch=2,
                       max_seq=32)


def _logits(model) -> torch.Tensor:
    idx = torch.arange(6).view(1, 6) * 37 % model.args.vocab_size
    with torch.inference_mode():
        return model(idx, torch.arange(6), kv_len=6)


def test_round_trip_native_names(tmp_path) -> None:
    src, dst = _model(1), _model(2)
    path = tmp_path / "ckpt.safetensors"
    save_file({n: p.to(torch.bfloat16) for n, p in src.named_parameters()}, path)
    st = SafeTensors(path)
    assert set(st.keys()) == {n for n, _ in src.named_parameters()} and st.get("norm").dtype == torch.bfloat16
    st.close()
    assert not torch.allclose(_logits(src), _logits(dst))
    filled = load_into(dst, path)
    assert len(filled) == len(list(dst.parameters()))
    ref = _model(1)
    for _n, p in ref.named_parameters():  # bf16 on disk: the loaded weights are the bf16-rounded ones
        p.data.copy_(p.data.to(torch.bfloat16).float())
    assert torch.equal(_logits(dst), _logits(ref))
    fast = _model(3, layers=2)  # a fast tier loads the first layers and skips the rest
    load_into(fast, path)
    assert torch.equal(fast.layers[1].ffn_norm, dst.layers[1].ffn_norm)


def test_export_hf_round_trips_through_the_hf_mapping(tmp_path) -> None:
    import json

    src, dst = _model(5), _model(6)
    out = export_hf(src, tmp_path / "hf", dtype=torch.float32)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["head_dim"] == src.args.head_dim
    names = SafeTensors(out / "model.safetensors").keys()
    assert "model.layers.0.self_attn.q_proj.weight" in names and not any("wqkv" in n for n in names)
    load_into(dst, out / "model.safetensors")  # back through the HF names and the un-permute
    assert torch.equal(_logits(dst), _logits(src))


def test_hf_names_are_mapped_and_unpermuted(tmp_path) -> None:
    src = _model(4)
    a = src.args
    hf: dict[str, torch.Tensor] = {"model.embed_tokens.weight": src.tok_embeddings, "model.norm.weight": src.norm,
                                   "lm_head.weight": src.output}
    for i, layer in enumerate(src.layers):
        q, k, v = layer.attention.wqkv.split([a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim,
                                              a.n_kv_heads * a.head_dim])
        pre = f"model.layers.{i}."
        hf.update({pre + "self_attn.q_proj.weight": hf_permute(q, a.n_heads, a.head_dim),
                   pre + "self_attn.k_proj.weight": hf_permute(k, a.n_kv_heads, a.head_dim),
                   pre + "self_attn.v_proj.weight": v, pre + "self_attn.o_proj.weight": layer.attention.wo,
                   pre + "mlp.gate_proj.weight": layer.feed_forward.w1,
                   pre + "mlp.up_proj.weight": layer.feed_forward.w3,
                   pre + "mlp.down_proj.weight": layer.feed_forward.w2,
                   pre + "input_layernorm.weight": layer.attention_norm,
                   pre + "post_attention_layernorm.weight": layer.ffn_norm})
    path = tmp_path / "hf.safetensors"
    save_file(hf, path)
    dst = _model(5)
    load_into(dst, path)
    assert torch.equal(_logits(dst), _logits(src))
    w = torch.randn(8 * 4, 3)
    assert torch.equal(hf_unpermute(hf_permute(w, 4, 8), 4, 8), w)


def test_bad_files_are_clear_errors(tmp_path) -> None:
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(CheckpointError):
        SafeTensors(junk)
    path = tmp_path / "small.safetensors"
    save_file({"norm": torch.ones(3)}, path)
    with pytest.raises(CheckpointError, match="shape"):
        load_into(_model(1), path)


def test_a_harness_starts_on_a_checkpoint_and_refuses_a_bad_one(tmp_path) -> None:
    from dataclasses import replace

    from services.engine_host.harness_core import Harness
    from services.engine_host.protocol import Generate, HarnessSpec

    src = _model(7)
    path = tmp_path / "real.safetensors"
    save_file(dict(src.named_parameters()), path)
    spec = HarnessSpec(tier="slow", model="llama-tiny", n_layers=None, seed=0, device="cpu", data_dir=str(tmp_path),
                       max_batch=2, max_seq=32, checkpoint=str(path), sandbox_pool=0)
    prompt = (5, 9, 13)

    def tokens(h: Harness) -> tuple[int, ...]:
        try:
            with torch.inference_mode():
                # the harness's own model and the live engine's (another process, weights shared) agree
                here = h.handle(Generate(prompt, 4, reference_only=True)).tokens
                assert h.handle(Generate(prompt, 4)).tokens == here
                return here
        finally:
            h.close()

    with torch.inference_mode():
        rt = Harness(spec, lambda _msg: None)
    assert rt.info().weights == str(path) and rt.info().start_stages["weights_s"] > 0
    want = tokens(rt)
    with torch.inference_mode():
        seeded = Harness(replace(spec, checkpoint="", seed=7), lambda _msg: None)
    assert tokens(seeded) == want  # the file's weights, not seed 0's
    small = tmp_path / "small.safetensors"
    save_file({"norm": torch.ones(3)}, small)
    with pytest.raises(CheckpointError, match="shape"), torch.inference_mode():
        Harness(replace(spec, checkpoint=str(small)), lambda _msg: None)
