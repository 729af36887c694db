# superopt: `make demo` runs the main job, `make test` the default test suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export OMP_WAIT_POLICY := PASSIVE
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-slow lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	# torch first and pinned: this exact version comes from a local CPU wheel.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/superopt demo

test: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard benchmarks) $(wildcard tools)
	$(BIN)/python -m pytest -q -n 2

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m slow

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard benchmarks) $(wildcard tools)

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
