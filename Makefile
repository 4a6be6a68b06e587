# Quick start:  make demo          set up .venv, then run `sluice demo`
#               make test          set up .venv with the test extras, then run the test suite
#               make demo GPU=1    on a machine with an NVIDIA GPU: the CUDA build of torch, torchvision, sluice[all,gpu]
# Without GPU=1 the CPU build of torch is installed first, so that nothing pulls CUDA wheels: torch==X+cpu from
# pip's own configuration where it has one, else from PyTorch's CPU wheel index (PyPI has no CPU build for Linux).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

ifeq ($(GPU),)
  ifeq ($(shell uname -s),Linux)
    TORCH ?= torch==$(TORCH_VERSION)+cpu
  else
    TORCH ?= torch==$(TORCH_VERSION)
  endif
  EXTRAS ?= all
else
  TORCH ?= torch==$(TORCH_VERSION) torchvision
  EXTRAS ?= all,gpu
endif

.PHONY: demo test setup setup-test torch bench examples docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

torch: $(BIN)/python
ifeq ($(GPU),)
	@$(BIN)/python -m pip install -q $(TORCH) 2>/dev/null || { \
	  echo "$(TORCH) is not on pip's configured indexes: taking it from $(TORCH_CPU_INDEX)"; \
	  $(BIN)/python -m pip install -q --extra-index-url $(TORCH_CPU_INDEX) $(TORCH); }
else
	$(BIN)/python -m pip install -q $(TORCH)
endif

setup: torch
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"

setup-test: torch
	$(BIN)/python -m pip install -q -e ".[test]"

demo: setup
	$(BIN)/sluice demo

test: setup-test
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/sluice bench

examples: setup-test
	$(BIN)/python -m pytest -q tests/test_examples.py

docs: setup-test
	$(BIN)/python -m sluice._stubs
	$(BIN)/python -m sluice._opdocs

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .sluice_cache
