# Two entry points for people: `make demo` and `make test`. Everything else is plumbing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: demo test lint proto clean

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
	$(BIN)/python -m pytest -q -rs

lint: $(STAMP)
	$(BIN)/ruff check .

proto: $(STAMP)
	$(BIN)/python -m proto.generate

clean:
	rm -rf $(VENV) demo-summary.json .polymorph
