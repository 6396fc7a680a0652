# Sill: `make run` serves the app with a worker and beat; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
MANAGE := $(BIN)/python manage.py
LOCALSTRIPE_VENV := .localstripe-venv

.PHONY: run test lint format bench install install-dev localstripe

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# localstripe (a third-party fake Stripe server) runs as its own process from its own venv.
$(LOCALSTRIPE_VENV)/bin/localstripe:
	$(PYTHON) -m venv $(LOCALSTRIPE_VENV)
	$(LOCALSTRIPE_VENV)/bin/pip install --quiet --upgrade pip
	$(LOCALSTRIPE_VENV)/bin/pip install --quiet 'localstripe>=1.15,<2'

localstripe: $(LOCALSTRIPE_VENV)/bin/localstripe

# Development server + a real Celery worker with beat, on SQLite and the embedded broker.
# The worker runs in a session of its own and is stopped by the trap alone (SIGTERM to its
# main process: a warm shutdown) when the server stops, on Ctrl-C, SIGTERM or SIGHUP to
# `make run`'s process group, or on its own. A signal sent to the whole group used to reach
# the worker's pool processes too; killed under it, they left its main process waiting
# forever on a lock they held, and `make run` never ended.
OWN_SESSION := $(BIN)/python -c 'import os, sys; os.setsid(); os.execv(sys.argv[1], sys.argv[1:])'
run: export DEBUG ?= 1
run: $(VENV)/.installed
	$(MANAGE) migrate --noinput
	$(MANAGE) demo
	@$(OWN_SESSION) $(BIN)/celery -A sill worker -B --loglevel INFO --concurrency 2 & \
	worker=$$!; \
	trap 'kill -TERM $$worker 2>/dev/null; wait $$worker 2>/dev/null' EXIT INT TERM HUP; \
	echo "Sill: http://127.0.0.1:$(PORT)/  (Ctrl-C stops the server and the worker)"; \
	$(MANAGE) runserver 127.0.0.1:$(PORT)

# The whole suite. pytest's exit code 5 ("no tests collected") is not a failure.
# TEST_WORKERS processes (pytest-xdist): much of a test's time is spent waiting on a subprocess,
# a browser or a socket, and two keep both cores busy. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: $(VENV)/.installed-dev localstripe
	$(BIN)/python -m playwright --version >/dev/null
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	DEBUG=1 $(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every bench/[!_]*.py on SQLite, then on PostgreSQL + Redis when DATABASE_URL / REDIS_URL are
# set; one table at the end, figures in var/bench/<UTC time>.json. BENCH_ARGS=--quick: short.
bench: $(VENV)/.installed-dev
	$(BIN)/python bench/_run.py $(BENCH_ARGS)
