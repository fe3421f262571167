# Two commands do all the set-up on a fresh machine:
#   make demo   -- install into .venv, then run a demo blueprint end to end (embedded Redis)
#   make test   -- install into .venv (with test extras), lint (ruff, mypy), then run the suite (not the soak runs:
#                  make soak; not the bench scripts: make bench). It ends with its wall time and slowest 20 tests.
# An up-to-date venv is not reinstalled: the installs leave stamps that only pyproject.toml makes stale.
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
PIP = $(BIN)/python -m pip install -qq

.PHONY: install install-test bytecode demo test soak lint bench bench-smoke fuzz chaos redteam conformance constraints clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@bash scripts/ensure-system-deps.sh
	$(PIP) -e '.[node]'
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	@bash scripts/ensure-system-deps.sh
	@bash scripts/ensure-test-deps.sh
	$(PIP) -e '.[node,test]'
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	@$(BIN)/ajet-runner demo

# Our modules compiled before the suite: with PYTHONDONTWRITEBYTECODE in the environment (as on our development machines)
# each of the ~230 processes the suite starts compiled every module it imported again (1.6 of the 4.4 CPU-s of an
# `ajet-runner run`). Only what changed since the last time is compiled; compileall does not follow the links
# under ajet_runner/, so the folders are named.
SOURCES = ajet_runner cli logsetup resultdir service statemachine store workers examples tests bench scripts
# pytest's assertion rewriting of the test modules is cached the same way: without it each xdist worker
# rewrote all ~200 test modules again (collecting took 11.5 CPU-s a worker, 3.4 with the cache). One collection writes the
# cache when a test module changed; the workers read it (they read it with PYTHONDONTWRITEBYTECODE too).
TEST_MODULES := $(shell find tests -name 'test_*.py' -o -name 'conftest.py')
$(VENV)/.rewritten: $(TEST_MODULES) | $(VENV)/.installed-test
	@out=$$(PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider 2>&1) \
		|| { echo "$$out" | tail -40; exit 1; }
	@touch $@

bytecode: install-test $(VENV)/.rewritten
	@$(BIN)/python -m compileall -q -j 0 $(SOURCES) > /dev/null

test: lint bytecode
	$(BIN)/python -m pytest -n 8 --dist loadgroup -q -m "not soak and not bench"

# The long runs kept out of make test (marked soak): the chaos run, the adoption under a 50 MB/s writer,
# the demo from a wheel in a fresh venv, and the parser budgets' long fuzz.
soak: install-test
	$(BIN)/python -m pytest -n 2 -q -m soak

# ruff's C901 stops a function above 15 (mccabe); scripts/complexity.py prints radon's figures (issue 40: the share
# of functions above 10, the highest), whose ceilings tests/unit/test_complexity.py holds.
lint: install-test
	$(BIN)/ruff check . && $(BIN)/mypy && $(BIN)/python scripts/complexity.py

# Hypothesis on every parser, the command lexer and rewrites (bash-executed), with time budgets.
# AJET_FUZZ_EXAMPLES: examples per property (make test runs a few). An API schemathesis suite
# (tests/integration/test_openapi_conformance.py) runs too, with AJET_RUNNER_SCHEMATHESIS_EXAMPLES examples per operation.
# The unit tests' hypothesis properties run a quarter of their examples in make test (tests/load.py: examples) and
# all of them here.
PROPERTY_TESTS = $(addprefix tests/unit/test_,$(addsuffix .py,logmetrics durations blueprint preflight results \
	signatures config_patch command))
FUZZ_EXAMPLES ?= 400
FUZZ_API_EXAMPLES ?= 500
fuzz: install-test
	AJET_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) AJET_RUNNER_SCHEMATHESIS_EXAMPLES=$(FUZZ_API_EXAMPLES) $(BIN)/python -m pytest -q \
		-p no:randomly tests/fuzz tests/unit/test_command_safety.py tests/integration/test_openapi_conformance.py \
		$(PROPERTY_TESTS)

# Every bench script at toy size (do they still run to their summary?), then each at its real size.
bench-smoke: install-test
	$(BIN)/python -m pytest -n 2 -q -p no:randomly -m bench

bench: bench-smoke
	for b in bench/bench_*.py; do $(BIN)/python $$b; done

# >= 200 short simulated experiments on 2 network-namespace hosts under kill -9, a Redis restart and a
# host cut; prints the figures and fails unless 0 duplicates / 0 lost / 0 orphans (needs root).
chaos: install-test
	$(BIN)/python bench/chaos.py --experiments $(or $(CHAOS_EXPERIMENTS),200)

# The red team with real processes (concurrent same-dir submissions, foreign Hosts, previous symlinks, a
# hostile model in a real run, planted secrets, /proc cmdlines, Chromium XSS/rebinding/framing); prints
# the table tried / how many / result. Its fast cases run in `make test` too (tests/redteam).
redteam: install-test
	$(BIN)/python tests/redteam/run.py

# The conformance tier: ajet-runner on the REAL agentjet 0.0.1 launcher from PyPI, in its own venv
# (scripts/conformance-venv.sh, build/conformance-venv) with GPU stand-ins; every run of tests/conformance/,
# one at a time, then the tier's figures (runs, evaluations seen/expected, time). make test runs its fast part.
conformance: install-test
	bash scripts/conformance-venv.sh
	AJET_CONFORMANCE=1 $(BIN)/python -m pytest -q -p no:randomly -p no:xdist -rxXs tests/conformance

# Regenerate the pins from a fresh venv with every extra (run after changing dependencies).
constraints:
	rm -rf build/constraints-venv && $(PY) -m venv build/constraints-venv
	build/constraints-venv/bin/python -m pip install -qq --upgrade pip
	build/constraints-venv/bin/python -m pip install -qq '.[node,test]'
	{ echo "# pip constraints for CI and the image: make constraints regenerates them"; \
	  build/constraints-venv/bin/python -m pip freeze --exclude ajet-runner; } > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
