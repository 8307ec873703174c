# The two README commands are `make demo` and `make test`; both set up what
# they need (Debian packages, a virtualenv) and are fast on the second run.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VENV_STAMP := $(VENV)/.installed

.PHONY: setup servers venv demo test lint bench soak clean

setup: servers venv

servers:
	@bash scripts/install-servers.sh

venv: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	@echo "installing fencegate with its extras and dev tools (a minute on a fresh machine)"
	$(BIN)/pip install --progress-bar on -e '.[dev,bench,postgresql,zookeeper,etcd]'
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

# The full fault and load suite (`fencegate soak`): about 3 minutes, loopback only; prints a table
# and fails if an acknowledged write was lost or an invariant broke. SOAK_ARGS=--duration 60 shortens it.
SOAK_ARGS ?= --duration 120 --clients 8
soak: setup
	$(BIN)/fencegate soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .state .mypy_cache .ruff_cache .pytest_cache
