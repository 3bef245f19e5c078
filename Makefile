# jetkafka: the everyday commands. Every target that runs Python sets up .venv first.
#
#   make run                  the Spark pipeline quick start on the embedded dev stack
#                             (RUN_ARGS="--events 50000" passes options to examples/run_pipeline.py)
#   make test                 the test suite, on two pytest-xdist workers (PYTEST_ARGS="tests/config -x"
#                             to narrow it; TEST_WORKERS=0 runs it in one process, as -s and --pdb need)
#   make lint                 mypy (strict, on jetkafka/; setup.cfg [mypy]) and ruff (on jetkafka/
#                             and tests/; ruff.toml): one line per tool, non-zero on any error
#   make soak                 the chaos soak, two runs of 10+ minutes each, judged by its checker,
#                             and nine rows of the guarantee matrix (Spark, SimpleKafkaProcessor's
#                             three modes, a poisoned partition, a slow one, channel.ordering key
#                             and none, a slow key; the other rows run in
#                             make test; SOAK_ARGS="--seed 42 -k recording" to repeat or narrow it)
#   make dev-up / dev-down    the local ZooKeeper and broker, in .jetkafka/devstack
#   make venv                 only create or refresh .venv
#   make clean                remove caches and build outputs (keeps .venv and dev stack data)

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
# Written after a successful install; older than setup.cfg, setup.py or jetkafka/__init__.py
# (it holds the version that setup.cfg reads) means install again.
STAMP := $(VENV)/.jetkafka-installed
# Interpreter that creates the venv; override with `make PYTHON=/path/to/python3.12 venv`.
PYTHON ?=
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`, each with its own ZooKeeper, broker and Spark session
# (tests/conftest.py groups the tests that must share one worker); 0: no workers, one process.
TEST_WORKERS ?= 2
SOAK_ARGS ?=
RUN_ARGS ?=

.PHONY: help venv test lint soak run dev-up dev-down clean

help:
	@echo "make run       run the Spark pipeline quick start (examples/run_pipeline.py; options: RUN_ARGS=...)"
	@echo "make test      run the tests on two workers (extra pytest arguments: PYTEST_ARGS=...; TEST_WORKERS=0: one process)"
	@echo "make lint      check types (mypy, strict) and style (ruff); fails on any error"
	@echo "make soak      run the chaos soak and its checker, 25+ minutes (SOAK_ARGS=\"--seed N\" ...)"
	@echo "make dev-up    start the local ZooKeeper and broker (jetkafka dev up)"
	@echo "make dev-down  stop them (jetkafka dev down)"
	@echo "make venv      create .venv and install jetkafka with its dev extra (every extra and the test tools)"
	@echo "make clean     remove caches and build outputs"

venv: $(STAMP)

$(STAMP): setup.cfg setup.py jetkafka/__init__.py
	@set -euo pipefail; \
	is_311() { "$$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }; \
	if [ -x "$(PY)" ] && is_311 "$(PY)"; then \
		echo "using existing $(VENV) ($$($(PY) --version))"; \
	else \
		py="$(PYTHON)"; \
		if [ -z "$$py" ]; then \
			if is_311 python3.11; then py=python3.11; \
			elif is_311 python3; then py=python3; \
			else \
				echo "error: jetkafka needs Python 3.11 or newer, and neither python3.11 nor python3 is one" >&2; \
				echo "  found: $$(python3 --version 2>&1 || echo 'no python3')" >&2; \
				echo "  fix: install Python 3.11 (e.g. apt-get install python3.11 python3.11-venv)," >&2; \
				echo "       or run: make PYTHON=/path/to/python3.11 $(MAKECMDGOALS)" >&2; \
				exit 1; \
			fi; \
		elif ! is_311 "$$py"; then \
			echo "error: PYTHON=$$py is not Python 3.11 or newer" >&2; exit 1; \
		fi; \
		echo "creating $(VENV) with $$($$py --version)"; \
		rm -rf "$(VENV)"; \
		"$$py" -m venv "$(VENV)"; \
	fi; \
	$(PY) -m pip install --quiet --upgrade pip; \
	$(PY) -m pip install --progress-bar off -e '.[dev]'; \
	touch "$@"; \
	echo "$(VENV) is ready"

test: venv
	@set -uo pipefail; \
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then \
		echo "make test: pytest collected no tests (exit 5); check PYTEST_ARGS" >&2; \
	fi; \
	exit $$status

# Both tools always run, so one pass shows every error; each prints its diagnostics (when there
# are any) and then one summary line. The exit status is non-zero when either found an error.
lint: venv
	@set -uo pipefail; status=0; \
	out=$$($(PY) -m mypy 2>&1); rc=$$?; \
	if [ $$rc -eq 0 ]; then \
		echo "mypy: ok, $$(tail -n 1 <<<"$$out" | sed 's/^Success: //')"; \
	else \
		grep -v '^Found [0-9]* error' <<<"$$out"; \
		echo "mypy: FAILED, $$(tail -n 1 <<<"$$out" | sed 's/^Found //')"; status=1; \
	fi; \
	out=$$($(PY) -m ruff check --quiet --output-format concise jetkafka tests 2>&1); rc=$$?; \
	if [ $$rc -eq 0 ]; then \
		echo "ruff: ok, no issues in jetkafka/ and tests/"; \
	else \
		printf '%s\n' "$$out"; \
		echo "ruff: FAILED, $$(grep -c . <<<"$$out") issues (ruff check --fix repairs the ones marked [*])"; status=1; \
	fi; \
	exit $$status

# The seed, the run directory and the checker's table are printed (-s); the test fails on any
# violation. Options: --seed N, --soak-duration S, --soak-events N, --soak-dir D (or the
# JETKAFKA_SOAK_* variables); tests/soak must be named for pytest to know them.
soak: venv
	@set -uo pipefail; \
	$(PY) -m pytest -q -s -ra --soak -m soak tests/soak $(SOAK_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then \
		echo "make soak: pytest collected no tests (exit 5); check SOAK_ARGS" >&2; \
	fi; \
	exit $$status

run: venv
	$(PY) examples/run_pipeline.py $(RUN_ARGS)

dev-up: venv
	$(VENV)/bin/jetkafka dev up

dev-down: venv
	$(VENV)/bin/jetkafka dev down

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache spark-warehouse metastore_db derby.log
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	find . -path ./$(VENV) -prune -o -name '*.egg-info' -type d -prune -exec rm -rf {} +
