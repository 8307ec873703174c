# The two README commands are `make demo` and `make test`; both set up what
# they need (Debian packages, a virtualenv) and are fast on the second run.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VENV_STAMP := $(VENV)/.installed

.PHONY: setup servers venv demo test lint bench clean

setup: servers venv

servers:
	@bash scripts/install-servers.sh

venv: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bench]'
	@touch $@

demo: setup
	$(BIN)/fencegate lab headline

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: setup lint
	$(BIN)/pytest

bench: setup
	$(BIN)/fencegate bench --plot docs/img/bench

clean:
	rm -rf $(VENV) .state .mypy_cache .ruff_cache .pytest_cache
