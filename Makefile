# Quick start: `make demo` then `make test`. The first run creates .venv (torch 2.13.0 first, then
# fxdeploy with every runtime that installs here; about 1.9 GB on disk). Here torch 2.13.0 is the
# CPU wheel because pip's find-links (/opt/wheels) holds torch-2.13.0+cpu; on a machine without it,
# pip takes PyPI's torch, the CUDA build: add --index-url https://download.pytorch.org/whl/cpu.
# `make test` also creates .venv-det for the detector suites: torch 2.14.1 and the real torchvision
# 0.29.1, downloaded from PyPI, where torch 2.14.1 is the CUDA 13.0 build (2.14.1+cu130) and pulls
# NVIDIA's CUDA libraries even on a machine without a GPU, then Ultralytics: about 6.7 GB on disk
# (3.2 GB of it NVIDIA libraries, 1.2 GB torch). Two torch versions are tested.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DET_VENV ?= .venv-det
DET_PY := $(DET_VENV)/bin/python
DET_STAMP := $(DET_VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export YOLO_OFFLINE := 1
export YOLO_CONFIG_DIR := $(CURDIR)/.ultralytics

.PHONY: venv det-venv demo test test-full test-core test-detectors test-compat zoo bench lint clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,openvino,ncnn,bench,triton]"
	touch $(STAMP)

venv: $(STAMP)

# torch first, pinned, so that torchvision and Ultralytics never pull another torch.
$(DET_STAMP): pyproject.toml
	python3 -m venv $(DET_VENV)
	$(DET_PY) -m pip install -q --upgrade pip
	$(DET_PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(DET_PY) -m pip install -q -e ".[dev,openvino,ncnn,bench,triton,detectors]"
	touch $(DET_STAMP)

det-venv: $(DET_STAMP)

demo: venv
	$(PY) examples/demo.py

# The two legs run side by side, each with two workers (4 processes on 2 cores: whichever leg ends
# first leaves both cores to the other), each module on one worker (--dist loadscope: a module's
# lowered artifacts and eager references are made once), each leg's output kept together.
# OMP_WAIT_POLICY=PASSIVE: OpenMP threads of four processes sharing two cores sleep rather than spin.
# make test runs each matrix's chosen cases (every model and every target; a module's
# `in_make_test`); make test-full runs every case.
TEST_MARK ?= and not full
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target test-core test-detectors

test-full:
	$(MAKE) --no-print-directory -j2 --output-sync=target test-core test-detectors TEST_MARK=

# The core suite on torch 2.13.0 (no torchvision there: the detector suites run in the other leg).
test-core: venv
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q -n 2 --dist loadscope --durations=60 \
		-m "(not zoo or zoo_fast) and not detectors $(TEST_MARK)"

# The detector suites on real torchvision and Ultralytics; a missing library fails, never skips.
# Each model's tests share a worker (one build, one eager reference), models handed out longest
# first (tests/detectors/conftest.py).
test-detectors: det-venv
	OMP_WAIT_POLICY=PASSIVE FXDEPLOY_REQUIRE_DETECTORS=1 $(DET_PY) -m pytest -q -n 2 \
		--dist loadgroup --no-loadscope-reorder --durations=0 -m "detectors $(TEST_MARK)" tests/detectors

# Another torch, by hand (not part of make test): `make test-compat` builds .venv-compat with
# torch==$(COMPAT_TORCH) and torchvision==$(COMPAT_TORCHVISION) from PyPI (CUDA builds: about 6 GB)
# and runs the core and the detector suites there. torch 2.11 is the lent GPU machine's; what
# fails there, and why, is in docs/internals.md ("torch 2.11").
COMPAT_VENV ?= .venv-compat
COMPAT_TORCH ?= 2.11.0
COMPAT_TORCHVISION ?= 0.26.0
test-compat:
	python3 -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(COMPAT_VENV)/bin/python -m pip install -q torch==$(COMPAT_TORCH) torchvision==$(COMPAT_TORCHVISION)
	$(COMPAT_VENV)/bin/python -m pip install -q -e ".[dev,openvino,ncnn,bench,triton,detectors]"
	OMP_WAIT_POLICY=PASSIVE $(COMPAT_VENV)/bin/python -m pytest -q -n 2 --dist loadscope \
		-m "(not zoo or zoo_fast) and not detectors $(TEST_MARK)"; core=$$?; \
	OMP_WAIT_POLICY=PASSIVE FXDEPLOY_REQUIRE_DETECTORS=1 $(COMPAT_VENV)/bin/python -m pytest -q -n 2 \
		--dist loadgroup --no-loadscope-reorder -m "detectors $(TEST_MARK)" tests/detectors; \
	test $$core -eq 0 -a $$? -eq 0

zoo: venv
	$(PY) -m pytest -q -m zoo

bench: venv
	$(PY) benchmarks/core_bench.py

lint: venv
	$(VENV)/bin/ruff check fxdeploy tests examples benchmarks

clean:
	rm -rf $(VENV) $(DET_VENV) $(COMPAT_VENV) .ultralytics .pytest_cache .hypothesis
