# Two commands do all the set-up on a fresh machine:
#   make demo   -- install into .venv, then run a demo blueprint end to end (embedded Redis)
#   make test   -- install into .venv (with test extras), then run the whole suite
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: install install-test demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	@bash scripts/ensure-system-deps.sh
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	@bash scripts/ensure-system-deps.sh
	@bash scripts/ensure-test-deps.sh
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

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
