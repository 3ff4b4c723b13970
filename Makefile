# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The console's browser libraries (npm, pinned by console/package-lock.json), copied where
# the API serves them; nothing is fetched at run time.
VENDOR := service/console/static/vendor

.PHONY: install demo test test-fast test-console lint docs crd images clean

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

# Without npm (a machine with Python alone) the console runs without its charts and YAML
# view, and its pages say so; `make test` needs npm (the console's browser tests).
install: $(STAMP)
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory $(VENDOR)/.installed; \
	else echo "npm not found: the console's charts and YAML view stay off until it is installed" >&2; fi

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

# The TrainingJob and HyperparameterTuningJob CRDs, generated from the REST API's request
# models (a test holds the chart's copies to them).
crd: $(STAMP)
	for plural in trainingjobs hyperparametertuningjobs; do \
	  $(BIN)/python -m service.custom_resources.crd $$plural > charts/runyard/crds/$$plural.yaml.new && \
	  mv charts/runyard/crds/$$plural.yaml.new charts/runyard/crds/$$plural.yaml || exit 1; \
	done

# The two images the chart runs, named as it names them: <IMAGE_REPOSITORY>/service and
# <IMAGE_REPOSITORY>/runtime, tagged with the chart's appVersion (runyard/service:0.1.0 and
# runyard/runtime:0.1.0 by default). Built with Docker, or podman where there is no Docker
# (IMAGE_TOOL chooses). Named in full (docker.io/...): podman would otherwise store
# them as localhost/runyard/..., a name no kubelet asks for. RUNTIME_BUILD_ARGS passes build
# arguments to the training image (--build-arg TORCH_INDEX_URL=... for a CUDA build).
# docs/deploying.md shows how to load them into kind or push them to a registry.
IMAGE_TOOL ?= $(shell command -v docker >/dev/null 2>&1 && echo docker || { command -v podman >/dev/null 2>&1 && echo podman; })
IMAGE_REPOSITORY ?= docker.io/runyard
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/runyard/Chart.yaml)
RUNTIME_BUILD_ARGS ?=

images:
	@test -n "$(IMAGE_TOOL)" || { echo "make images needs docker or podman (or IMAGE_TOOL=...)" >&2; exit 2; }
	$(IMAGE_TOOL) build -f service/Dockerfile -t $(IMAGE_REPOSITORY)/service:$(IMAGE_TAG) .
	$(IMAGE_TOOL) build -f runtime/Dockerfile $(RUNTIME_BUILD_ARGS) -t $(IMAGE_REPOSITORY)/runtime:$(IMAGE_TAG) .

# Two test processes by default (CI's machine has two cores); TEST_WORKERS=0 runs one.
# A file's tests stay in one process: its module fixtures (a server, a cluster) serve them.
TEST_WORKERS ?= 2

# The 25 slowest tests are listed at the end: where the suite's half hour goes.
test: lint
	$(BIN)/pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile --durations=25

# The units, for a newcomer's edit-and-check loop (about five minutes here): on SQLite
# only, with no server stacks, browsers, clusters (kmock), clouds (moto), images built
# with pip, real launchers and runtimes, multi-process training, thousands of jobs made
# to bound a request's reads, or podman (PostgreSQL and those are `make test`'s, and
# `make test-<part>` runs a part's all). Four processes: the tests wait
# on subprocesses and sockets often enough that two cores keep four busy. What needs a
# missing tool skips saying so (fails under CI); tests/bare_machine.sh runs it as on a
# machine with Python alone.
FAST_SKIPS := e2e deploy tensorflow libraries service/console service/custom_resources \
    runyard/test_server_startup.py runyard/test_server_supervisor.py runyard/test_demo.py \
    runyard/test_server_detached.py service/observability/test_server_processes.py \
    service/test_api_workers.py runtime/reporting/test_failure_ranks.py \
    runtime/instance/test_layers.py provisioning/test_local_image_builds.py \
    provisioning/test_local_stand_ins.py provisioning/test_ec2_backend.py \
    provisioning/test_kubernetes_backend.py contract/test_storage_s3.py \
    service/sources/test_storage_s3_service.py runtime/test_train_process.py \
    runtime/launch/test_script_exit.py runtime/launch/test_run_script.py \
    service/jobs/test_pages_plan.py service/sagemaker/test_bounded_reads.py \
    service/sagemaker/test_log_group_bounded.py
FAST_WORKERS ?= 4
test-fast: install
	$(BIN)/pytest --numprocesses=$(FAST_WORKERS) --dist=loadfile \
	    -m "not e2e and not postgres and not container_engine" \
	    $(addprefix --ignore=tests/,$(FAST_SKIPS))

# One part's tests: `make test-service`, `test-worker`, `test-provisioning`, `test-runtime`,
# `test-libraries`, `test-contract`, `test-runyard`, and apart from the packages' own,
# `test-e2e`, `test-deploy`, `test-tensorflow` and `test-console` (the browser's).
test-console: install
	$(BIN)/pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile tests/service/console

test-%: install
	@test -d tests/$* || { echo "no tests/$*: see the test- targets in the Makefile" >&2; exit 2; }
	$(BIN)/pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile tests/$*

clean:
	rm -rf $(VENV) $(VENDOR) console/node_modules .pytest_cache .mypy_cache .ruff_cache *.egg-info
