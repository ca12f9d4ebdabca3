# flux-epilog-gate: install into a virtual environment, demo, tests.
#
#   make demo    install, then run the demo in a throwaway flux instance
#   make check   install, then run the tests (pytest, in parallel, and
#                sharness): every test but those marked slow
#   make check-slow  install, then the slow tests (the soak, the callgrind
#                counts, the long timeouts); CI runs both
#   make bench   install, then run the benchmark
#
# PYTHON and VENV choose the interpreter and the environment, e.g.
#   make check PYTHON=python3.12 VENV=.venv-3.12
#
#   make install-system     the plugin, `flux epilog-gate` and the man pages
#                           where flux-core finds them (PREFIX, DESTDIR: see
#   make uninstall-system   README.md, "System install and packaging")

PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
SOURCES = setup.py pyproject.toml $(wildcard flux_epilog_gate/*.py) \
	$(wildcard flux_epilog_gate/gate/*.py) $(wildcard flux_epilog_gate/dws/*.py) \
	$(wildcard flux_epilog_gate/plugin/*.py) $(wildcard flux_epilog_gate/client/*.py) \
	$(wildcard flux_epilog_gate/jobtap/*.py) flux_epilog_gate/jobtap/runtime.c \
	flux_epilog_gate/plugin/fastpath.c flux_epilog_gate/plugin/stamp.c \
	flux_epilog_gate/dws/service.c

# System install: flux-core's own directories for what it finds by name,
# PREFIX for the rest.
FLUX_PKG = pkg-config --silence-errors
PREFIX ?= $(or $(shell $(FLUX_PKG) --variable=prefix flux-core),/usr/local)
PKGLIBDIR ?= $(PREFIX)/lib/flux-epilog-gate
MANDIR ?= $(PREFIX)/share/man
FLUX_LIBDIR ?= $(shell $(FLUX_PKG) --variable=fluxlibdir flux-core)
JOBTAP_PLUGINDIR ?= $(FLUX_LIBDIR)/job-manager/plugins
FLUX_CMDDIR ?= $(shell $(FLUX_PKG) --variable=fluxcmddir flux-core)
DOC_PYTHON ?= $(PYTHON)
SYSTEM_INSTALL = PYTHON="$(PYTHON)" DESTDIR="$(DESTDIR)" PKGLIBDIR="$(PKGLIBDIR)" \
	MANDIR="$(MANDIR)" JOBTAP_PLUGINDIR="$(JOBTAP_PLUGINDIR)" \
	FLUX_CMDDIR="$(FLUX_CMDDIR)" DOC_PYTHON="$(DOC_PYTHON)" \
	PIP_FLAGS="$(PIP_FLAGS)" tools/system-install

.PHONY: prereq prereq-test prereq-bench install demo check check-slow pytest sharness \
	bench lint \
	install-system uninstall-system venv-matches

# Each stops at once, naming what to install, if a prerequisite is missing.
prereq:
	@tools/check-prereqs build

prereq-test:
	@tools/check-prereqs build test

prereq-bench:
	@tools/check-prereqs build bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# An existing VENV made with another Python than PYTHON would silently be
# installed into: say so instead.
PYVER = import sys; print("%d.%d" % sys.version_info[:2])
venv-matches: | $(BIN)/python
	@want=$$($(PYTHON) -c '$(PYVER)') && have=$$($(BIN)/python -c '$(PYVER)') && \
	test "$$want" = "$$have" || { \
	  echo "error: $(VENV) has Python $$have, not $(PYTHON)'s $$want:" \
	    "give another VENV (e.g. VENV=.venv-$$want) or remove $(VENV)." >&2; \
	  exit 1; }

$(VENV)/.installed: $(SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet '.[test]'
	@touch $@

install: prereq venv-matches $(VENV)/.installed

demo: install
	$(BIN)/python examples/demo.py

# The test files run in parallel (pytest-xdist), each file on one worker
# (its shared instances are made once); PYTEST_WORKERS=0 runs them in turn.
# Two workers a CPU: most of a test's time is spent waiting on its
# instance, not computing.  PYTEST_ARGS: more options, e.g. --durations=30.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$((n * 2)))
PYTEST_CHECK = $(BIN)/pytest t -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile \
	$(PYTEST_ARGS)

pytest: prereq-test install
	$(PYTEST_CHECK)

sharness: prereq-test install
	PATH="$(abspath $(BIN)):$$PATH" sharness/run-all

# sharness runs beside pytest (its output is printed once it is done);
# check fails if either does.
SHARNESS_LOG = $(VENV)/sharness.log
check: prereq-test install
	@PATH="$(abspath $(BIN)):$$PATH" sharness/run-all >$(SHARNESS_LOG) 2>&1 & \
	sharness=$$!; \
	echo '$(PYTEST_CHECK)'; $(PYTEST_CHECK); pytest=$$?; \
	wait $$sharness; status=$$?; \
	echo 'PATH="$(abspath $(BIN)):$$PATH" sharness/run-all'; cat $(SHARNESS_LOG); \
	test $$pytest -eq 0 && test $$status -eq 0

check-slow: prereq-test install
	$(BIN)/pytest t -m slow $(PYTEST_ARGS)

install-system: prereq
	$(SYSTEM_INSTALL) install

uninstall-system:
	$(SYSTEM_INSTALL) uninstall

bench: prereq-bench install
	$(BIN)/python bench/run.py

$(BIN)/ruff: | $(BIN)/python
	$(BIN)/pip install --quiet black ruff

lint: $(BIN)/ruff
	$(BIN)/black --check flux_epilog_gate t bench examples setup.py
	$(BIN)/ruff check flux_epilog_gate t bench examples setup.py
