# Tollgate: `make run` and `make test` work on a fresh clone (they create .venv and install).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
# `langgraph dev` gets its own environment: langgraph-api's pins conflict with the dev extra's.
STUDIO_VENV := .venv-studio
PYTHON ?= python3
# The checkout itself, wherever make is run from (through a link, or with -C): editable installs point here.
ROOT := $(dir $(realpath $(lastword $(MAKEFILE_LIST))))
# `make run PORT=8080`, `make studio PORT=2025`.
PORT ?=

export LANGGRAPH_STRICT_MSGPACK := true
export LANGGRAPH_CLI_NO_ANALYTICS := 1
export LANGSMITH_TRACING := false
export LANGGRAPH_NO_VERSION_CHECK := true

.PHONY: setup setup-studio system-packages run chat studio studio-open test eval bench bench-smoke lock clean

# Dependencies are compiled to bytecode when installed (pip's default, not uv's): a process that
# may not write bytecode (PYTHONDONTWRITEBYTECODE) would otherwise compile LangGraph, LangChain and
# the rest from source at every start, about 1.5 s of each server, worker and test process.
$(VENV)/.installed: pyproject.toml requirements.lock examples/bookmarks/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check uv==0.13.8
	$(UV) pip install -q --compile-bytecode --python $(PY) -r requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps -e $(ROOT) -e $(ROOT)examples/bookmarks
	touch $@

setup: $(VENV)/.installed

$(STUDIO_VENV)/.installed: $(VENV)/.installed pyproject.toml requirements-studio.lock examples/bookmarks/pyproject.toml
	test -x $(STUDIO_VENV)/bin/python || $(PYTHON) -m venv $(STUDIO_VENV)
	$(UV) pip install -q --compile-bytecode --python $(STUDIO_VENV)/bin/python -r requirements-studio.lock
	$(UV) pip install -q --python $(STUDIO_VENV)/bin/python --no-deps -e $(ROOT) -e $(ROOT)examples/bookmarks
	touch $@

setup-studio: $(STUDIO_VENV)/.installed

## Start Tollgate: embedded PostgreSQL, offline picker, demo data, the HTTP server and web page
## on http://127.0.0.1:8000/ with one background worker; prints a demo bearer token.
run: setup
	$(VENV)/bin/tollgate serve --demo $(if $(PORT),--port $(PORT))

## A terminal chat as `demo` (approvals inline), on the same database.
chat: setup
	$(VENV)/bin/tollgate chat

## LangGraph Studio's local API (`langgraph dev`) on http://127.0.0.1:2024, on the same database.
## No reloader: it would watch the database files under ./var (restart after a code change).
studio: setup-studio
	$(STUDIO_VENV)/bin/langgraph dev --no-browser --no-reload --port $(or $(PORT),2024)

## The same without authentication, for development on this machine only (127.0.0.1; it says so as it starts).
studio-open: setup-studio
	$(STUDIO_VENV)/bin/langgraph dev --config langgraph-open.json --host 127.0.0.1 --no-browser --no-reload --port $(or $(PORT),2024)

## The Debian packages the tests drive for real (Chromium, Dovecot), installed when missing
## (as root, or with sudo; otherwise it prints the one command to run).
system-packages:
	.ci/system-packages

## Every test, against a real (embedded) PostgreSQL.
test: setup setup-studio system-packages
	$(PY) -m tollgate.evals.routing
	$(PY) -m bench --smoke
	$(PY) -m pytest

## The offline picker's routing eval, the adversarial safety eval, the honesty gate's eval and the
## multi-step tasks eval (print tables; fail below their floors). `python -m tollgate.evals.tasks --model`
## plays the tasks with the picker model the environment configures.
eval: setup
	$(PY) -m tollgate.evals.routing
	$(PY) -m tollgate.evals.safety
	$(PY) -m tollgate.evals.honesty
	$(PY) -m tollgate.evals.tasks

## Benchmarks: Tollgate vs a bare LangChain agent, a bare FastAPI agent app on a 1 s model and `langgraph dev`, and two servers on one database, as ratios in one run (about 9 minutes; see bench/README.md).
bench: setup setup-studio
	$(PY) -m bench

## The benchmarks with tiny counts, all at once (about 30 s; `langgraph dev` skipped), so they cannot rot; part of `make test`.
bench-smoke: setup
	$(PY) -m bench --smoke

## Re-pin every dependency (writes requirements.lock).
lock:
	$(UV) pip compile pyproject.toml --extra dev -o requirements.lock -q
	$(UV) pip compile pyproject.toml --extra studio -o requirements-studio.lock -q

clean:
	rm -rf $(VENV) $(STUDIO_VENV) .langgraph_api var .pytest_cache .hypothesis
