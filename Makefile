# The two commands of the README: `make run` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamps: reinstall only when pyproject.toml changes.
$(VENV)/.app-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# The integration tests drive the agent client (its own distribution in client/) against the
# server, so the test venv has it too, editable.
$(VENV)/.test-installed: pyproject.toml client/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test]" -e ./client
	touch $@ $(VENV)/.app-installed

## Install, migrate, load the demo data and serve on http://127.0.0.1:8000 (SQLite, no login
## needed from this machine).
run: $(VENV)/.app-installed
	$(BIN)/toolscope db upgrade
	$(BIN)/toolscope demo
	TOOLSCOPE_DEV=1 $(BIN)/toolscope serve --host $(HOST) --port $(PORT)

# pytest-xdist workers for `make test` (docs/testing.md). Three on the 2-core machines the suite
# is measured on: much of it waits on servers, browsers and PostgreSQL, and three workers ran it
# in 734 s where two took 908 s (same load). `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 3

## Install the test extras and run the whole suite (SQLite, PostgreSQL, browser tests; the
## client's own tests run in a fresh venv without Flask, see tests/test_client_package.py).
test: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .

# The OTLP section drives the server with the OpenTelemetry SDK's exporter (an extra).
$(VENV)/.bench-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[otlp-bench]"
	touch $@ $(VENV)/.app-installed

bench: $(VENV)/.bench-installed
	$(BIN)/toolscope bench

clean:
	rm -rf $(VENV) instance test-artifacts build dist
