# The two commands of the README: `make demo` (whole pipeline, locally) and `make test`.
# Both install what a fresh Debian machine lacks first (`make setup`), then use .venv.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
FS := $(VENV)/bin/fraudstream
PYTEST_ARGS ?=

.PHONY: setup demo test test-all test-unit test-fault stack-up stack-down bench lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@bash scripts/system-deps.sh
	@test -x $(PY) || python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

demo: setup
	$(FS) demo

# Unit and integration tests (real Kafka and Redis). The fault suite runs with `make test-fault`
# (about 8 minutes); it is kept out of CI until it passes three runs in a row (README).
test: setup
	$(PY) -m pytest -m "not fault" $(PYTEST_ARGS)

# Everything, the fault suite included.
test-all: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fault: setup
	$(PY) -m pytest -m fault $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

stack-up: setup
	$(FS) stack up

stack-down: setup
	$(FS) stack down

lint: setup
	$(VENV)/bin/ruff check app tests benchmarks

clean:
	rm -rf $(VENV) .fraudstream
