# Quick start: `make demo` then `make test`. The first run creates .venv (torch 2.13.0 CPU first,
# so nothing pulls CUDA wheels), then installs fxdeploy with every runtime that installs here.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv demo test zoo bench lint clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,openvino,ncnn,bench,triton]"
	touch $(STAMP)

venv: $(STAMP)

demo: venv
	$(PY) examples/demo.py

test: venv
	$(PY) -m pytest -q -m "not zoo or zoo_fast"

zoo: venv
	$(PY) -m pytest -q -m zoo

bench: venv
	$(PY) benchmarks/core_bench.py

lint: venv
	$(VENV)/bin/ruff check fxdeploy tests examples benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
