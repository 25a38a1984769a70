# Tollgate: `make run` and `make test` work on a fresh clone (they create .venv and install).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
PYTHON ?= python3

export LANGGRAPH_STRICT_MSGPACK := true
export LANGGRAPH_CLI_NO_ANALYTICS := 1
export LANGSMITH_TRACING := false
export LANGGRAPH_NO_VERSION_CHECK := true

.PHONY: setup run test eval bench bench-smoke lock clean

$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check uv==0.13.8
	$(UV) pip install -q --python $(PY) -r requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps -e .
	touch $@

setup: $(VENV)/.installed

## Start Tollgate: embedded PostgreSQL, offline picker, demo data, a terminal chat as `demo`.
run: setup
	$(PY) cli.py chat

## Every test, against a real (embedded) PostgreSQL.
test: setup
	$(PY) -m evals.routing
	$(PY) -m bench --smoke
	$(PY) -m pytest

## The offline picker's routing eval (prints a table; fails below its floor).
eval: setup
	$(PY) -m evals.routing

## Benchmarks: Tollgate vs a bare LangChain agent, as ratios in one run (a few minutes).
bench: setup
	$(PY) -m bench

## The benchmarks with tiny counts (seconds), so they cannot rot; part of `make test`.
bench-smoke: setup
	$(PY) -m bench --smoke

## Re-pin every dependency (writes requirements.lock).
lock:
	$(UV) pip compile pyproject.toml --extra dev -o requirements.lock -q

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
