# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The console's browser libraries (npm, pinned by console/package-lock.json), copied where
# the API serves them; nothing is fetched at run time.
VENDOR := service/console/static/vendor

.PHONY: install demo test test-fast lint docs clean

# torch first and pinned: it comes from the local CPU wheel, so nothing pulls a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0 numpy
	$(BIN)/pip install --quiet -e '.[dev,train]'
	touch $(STAMP)

$(VENDOR)/.installed: console/package.json console/package-lock.json
	cd console && npm ci --no-audit --no-fund --loglevel=error
	mkdir -p $(VENDOR)
	cp console/node_modules/uplot/dist/uPlot.iife.min.js console/node_modules/uplot/dist/uPlot.min.css \
	   console/node_modules/js-yaml/dist/js-yaml.min.js $(VENDOR)/
	touch $@

install: $(STAMP) $(VENDOR)/.installed

demo: install
	$(BIN)/python examples/demo.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest --quiet -p no:cacheprovider tests/test_layering.py

# The generated pages: docs/configuration.md from the settings' own descriptions, and
# docs/job-lifecycle.md from the lifecycle's table (tests hold the committed pages to them).
docs: $(STAMP)
	$(BIN)/python -m service.settings_docs > docs/configuration.md.new
	mv docs/configuration.md.new docs/configuration.md
	$(BIN)/python -m service.jobs.lifecycle > docs/job-lifecycle.md.new
	mv docs/job-lifecycle.md.new docs/job-lifecycle.md

# Two test processes by default (CI's machine has two cores); TEST_WORKERS=0 runs one.
# A file's tests stay in one process: its module fixtures (a server, a cluster) serve them.
TEST_WORKERS ?= 2

test: lint
	$(BIN)/pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile

# The units, for a newcomer's edit-and-check loop: no server stacks, browsers, clusters,
# images or multi-process training (those are `make test`'s).
FAST_SKIPS := e2e console deploy tensorflow dataparallel modelparallel horovod parameter_server
test-fast: install
	$(BIN)/pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile -m "not e2e" \
	    $(addprefix --ignore=tests/,$(FAST_SKIPS))

clean:
	rm -rf $(VENV) $(VENDOR) console/node_modules .pytest_cache .mypy_cache .ruff_cache *.egg-info
