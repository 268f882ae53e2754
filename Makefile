# RollMux developer commands. `make run` and `make test` are the two that matter.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3.11

# Test and benchmark defaults: the local PostgreSQL and Redis (CI starts them).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/rollmux
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
# Keep Ray and Chromium on loopback (see docs/configuration.md).
RAY_ENV := RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled \
	http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 no_proxy=127.0.0.1,localhost,::1

.PHONY: install compile run run-cluster test check lint fmt types contracts templates bench

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev,rl]'
	touch $@

# The core's compiled build (scheduler.compiled, mypyc: about two minutes), used by the
# simulator's benchmarks and by any process started with ROLLMUX_COMPILED=1 while it matches
# the sources; rebuilt when a source of the core changes. A failed build is reported and
# leaves the core interpreted (nothing else depends on it).
COMPILED := .compiled/manifest.json
$(COMPILED): $(VENV)/.installed $(shell find scheduler -name '*.py')
	$(PY) devtools/compile_sim.py > .compiled.log 2>&1 && rm -f .compiled.log \
		|| echo "compile: the core's compiled build failed (.compiled.log); it runs as Python"

compile: $(COMPILED)

install: $(VENV)/.installed $(COMPILED)

# Every Ray these start keeps its own temp directory, ROLLMUX_RAY_TEMP_DIR (docs/operations.md).
run: install
	./bin/run.sh

# The demo on a local multi-node Ray: a head plus one raylet per inventory node (2 H20 +
# 2 H800, 2 GPUs each), its own SQLite database; Ctrl-C stops the Ray processes it started.
run-cluster: install
	$(PY) bin/run_cluster.py

# Two stages: the tests that need no Ray, Celery worker or Chromium and are not slow run on
# TEST_WORKERS processes (pytest-xdist; each its own test database), then those run one at a
# time (they start clusters, workers and browsers and keep timing margins). TEST_WORKERS=0
# runs the first stage in one process too. A stage PYTEST_ARGS leaves empty (exit 5) passes.
TEST_WORKERS ?= 2
SERIAL_MARKS := browser or celery or ray or slow
TEST_ENV = DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} DJANGO_ALLOW_ASYNC_UNSAFE=true $(RAY_ENV)
test: install
	$(TEST_ENV) $(VENV)/bin/pytest -m "not ($(SERIAL_MARKS))" -n $(TEST_WORKERS) $(PYTEST_ARGS) \
		|| [ $$? -eq 5 ]
	$(TEST_ENV) $(VENV)/bin/pytest -m "$(SERIAL_MARKS)" $(PYTEST_ARGS) || [ $$? -eq 5 ]

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

types: install
	$(VENV)/bin/mypy scheduler workers rollmux_web rollmux rollmux_contract rollmux_cli

contracts: install
	$(VENV)/bin/lint-imports

templates: install
	$(VENV)/bin/djlint templates --lint --profile=django --ignore=H006,H021,H030,H031,T003,H013,H023,H019,H025,H020

check: lint types contracts templates test

# Benchmarks print their figures; the last three need PostgreSQL and Redis (and Ray).
bench: install
	$(PY) bench/planner_latency.py
	$(PY) bench/sim_speed.py
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) bench/gantt.py
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
	DJANGO_ALLOW_ASYNC_UNSAFE=true $(RAY_ENV) $(PY) bench/control_plane.py
	$(PY) bench/api_submit.py
