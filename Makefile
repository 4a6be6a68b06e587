# Quick start:  make demo   (set up, then run `sluice demo`)
#               make test   (set up, then run the test suite)
# The CPU build of torch is installed first so that nothing pulls CUDA wheels on machines without a GPU.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0

.PHONY: demo test setup setup-test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[all]"

setup-test: $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test]"

demo: setup
	$(BIN)/sluice demo

test: setup-test
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/sluice bench

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
