# flux-epilog-gate: install into a virtual environment, demo, tests.
#
#   make demo    install, then run the demo in a throwaway flux instance
#   make check   install, then run every test (pytest and sharness)
#   make bench   install, then run the benchmark

PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
SOURCES = setup.py pyproject.toml $(wildcard flux_epilog_gate/*.py) \
	$(wildcard flux_epilog_gate/jobtap/*.py) flux_epilog_gate/jobtap/entry.c

.PHONY: prereq install demo check pytest sharness bench lint

prereq:
	@command -v flux >/dev/null 2>&1 || { \
	  echo "error: flux-core is not installed ('flux' is not on PATH)." >&2; \
	  echo "flux-core >= 0.88 is a prerequisite: see README.md." >&2; exit 1; }
	@pkg-config --exists flux-core || { \
	  echo "error: flux-core development files not found by pkg-config." >&2; \
	  exit 1; }

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet '.[test]'
	@touch $@

install: prereq $(VENV)/.installed

demo: install
	$(BIN)/python examples/demo.py

pytest: install
	$(BIN)/pytest t

sharness: install
	PATH="$(abspath $(BIN)):$$PATH" sharness/run-all

check: install
	$(BIN)/pytest t
	PATH="$(abspath $(BIN)):$$PATH" sharness/run-all

bench: install
	$(BIN)/python bench/run.py

lint:
	$(BIN)/black --check flux_epilog_gate t bench examples setup.py
	$(BIN)/ruff check flux_epilog_gate t bench examples setup.py
