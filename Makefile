# The two commands of the README: `make demo` (whole pipeline, locally) and `make test`.
# Both install what a fresh Debian machine lacks first (`make setup`), then use .venv.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
FS := $(VENV)/bin/fraudstream
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast test-unit test-fault stack-up stack-down bench lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@bash scripts/system-deps.sh
	@test -x $(PY) || python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

demo: setup
	$(FS) demo

# Everything: unit, integration (real Kafka and Redis) and the fault suite (about 8 minutes of it).
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# Without the fault suite.
test-fast: setup
	$(PY) -m pytest -m "not fault" $(PYTEST_ARGS)

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
