# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint clean

# torch first and pinned: it comes from the local CPU wheel, so nothing pulls a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0 numpy
	$(BIN)/pip install --quiet -e '.[dev,train]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python examples/demo.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
