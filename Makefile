# The two commands of the README: `make demo` (whole pipeline, locally) and `make test`.
# Both install what a fresh Debian machine lacks first (`make setup`), then use .venv.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
FS := $(VENV)/bin/fraudstream
PYTEST_ARGS ?=
# `make demo` leaves the worker and the action service running to look around.
DEMO_ARGS ?= --keep
# Everything a run writes goes under the state directory, setup's details included.
STATE_DIR := $(or $(FRAUDSTREAM_STATE_DIR),.fraudstream)
SETUP_LOG := $(STATE_DIR)/setup.log

.PHONY: setup demo test test-fast test-unit test-fault test-fault-cluster stack-up stack-down bench lint clean

setup: $(VENV)/.installed

# Quiet: one line per step here, apt's and pip's output in $(SETUP_LOG) (its tail on failure).
# setup.py and the C sources too: an edited or new extension is built again (pip install -e)
$(VENV)/.installed: pyproject.toml setup.py $(wildcard app/*/*.c app/*/*/*.c app/_vendor/*/*.h)
	@mkdir -p $(STATE_DIR) && : > $(SETUP_LOG)
	@echo "setup: system packages (details in $(SETUP_LOG))"
	@bash scripts/system-deps.sh >>$(SETUP_LOG) 2>&1 || { tail -n 20 $(SETUP_LOG); echo "setup failed: see $(SETUP_LOG)"; exit 1; }
	@echo "setup: virtualenv $(VENV) and Python packages"
	@{ test -x $(PY) || python3 -m venv --system-site-packages $(VENV); } >>$(SETUP_LOG) 2>&1
	@$(PY) -m pip install --upgrade pip >>$(SETUP_LOG) 2>&1 && $(PY) -m pip install -e '.[dev]' >>$(SETUP_LOG) 2>&1 || { tail -n 20 $(SETUP_LOG); echo "setup failed: see $(SETUP_LOG)"; exit 1; }
	@touch $@

demo: setup
	@$(FS) demo $(DEMO_ARGS)

# Everything: unit, integration (real Kafka and Redis) and the fault suite (about 8 minutes of it).
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# Without the fault suite.
test-fast: setup
	$(PY) -m pytest -m "not fault" $(PYTEST_ARGS)

test-fault: setup
	$(PY) -m pytest -m fault $(PYTEST_ARGS)

# The failover scenarios (marked `cluster`) on the cluster profile: three KRaft Kafka nodes and a
# Redis Cluster on their own ports and state dir, brought up for the run and down after it, even
# when a scenario fails. KAFKA_BOOTSTRAP/REDIS_URL are cleared: the profile's own services are used.
CLUSTER_KAFKA_PORT ?= 29140
CLUSTER_REDIS_PORT ?= 17140
CLUSTER_STATE_DIR ?= $(STATE_DIR)/cluster
CLUSTER_ENV = env -u KAFKA_BOOTSTRAP -u REDIS_URL FRAUDSTREAM_STACK_PROFILE=cluster \
	FRAUDSTREAM_STATE_DIR=$(CLUSTER_STATE_DIR) FRAUDSTREAM_KAFKA_CLUSTER_PORT=$(CLUSTER_KAFKA_PORT) \
	FRAUDSTREAM_REDIS_CLUSTER_PORT=$(CLUSTER_REDIS_PORT)

test-fault-cluster: setup
	@trap '$(CLUSTER_ENV) $(FS) stack down' EXIT; \
	$(CLUSTER_ENV) $(FS) stack up && \
	$(CLUSTER_ENV) $(PY) -m pytest -m "fault and cluster" $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

stack-up: setup
	$(FS) stack up

stack-down: setup
	$(FS) stack down

lint: setup
	$(VENV)/bin/ruff check app tests benchmarks

clean:
	rm -rf $(VENV) $(STATE_DIR)
