# Two commands do all the set-up on a fresh machine:
#   make demo   -- install into .venv, then run a demo blueprint end to end (embedded Redis)
#   make test   -- install into .venv (with test extras), then run the whole suite
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: install install-test demo test lint bench chaos clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	@bash scripts/ensure-system-deps.sh
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	@bash scripts/ensure-system-deps.sh
	$(BIN)/pip install -q -e '.[test]'

demo: install
	$(BIN)/ajet-runner demo

test: install-test
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -q

lint: install-test
	$(BIN)/ruff check .

bench: install-test
	for b in bench/bench_*.py; do $(BIN)/python $$b; done

# >= 200 short simulated experiments on 2 network-namespace hosts under kill -9, a Redis restart and a
# host cut; prints the figures and fails unless 0 duplicates / 0 lost / 0 orphans (needs root).
chaos: install-test
	$(BIN)/python bench/chaos.py --experiments $(or $(CHAOS_EXPERIMENTS),200)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
