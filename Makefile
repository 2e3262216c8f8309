# kernelopt. Set-up is two commands:
#   make run    a demo server on http://127.0.0.1:8000 (SQLite + in-process worker, no services needed)
#   make test   the whole test suite on PostgreSQL, browser tests in headless Chromium
# Also: make worker (a separate dramatiq worker), make lint, make ascend (the npu-target compile env).

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kernelopt-installed
ADDRESS ?= 127.0.0.1:8000
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/kernelopt
# the queues of every device kind diagnosis.engine.devices registers
QUEUES ?= $(shell $(PY) -m diagnosis.engine.devices)
# triton-ascend 3.2.0 is a cp311 wheel only, whatever PYTHON is.
ASCEND_PYTHON ?= $(shell command -v python3.11)
ASCEND_VENV := .venv-ascend
ASCEND_PY := $(ASCEND_VENV)/bin/python
ASCEND_STAMP := $(ASCEND_VENV)/.kernelopt-ascend-installed
TEST_WORKERS ?= 3

.PHONY: install ascend envs run worker test lint chromium bubblewrap testdb

install: $(STAMP)

# Both environments are installed by uv, from PyPI like pip: on a clean clone of the 2-core CI
# machine it built .venv alone in 17 s where pip took 53 s (unpacking and byte-compiling torch). uv
# reads no pip.conf, so pip's find-links (where this machine's CPU build of torch 2.13 lies) are
# passed on as UV_FIND_LINKS; keep the torch pin exactly so.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL = UV_FIND_LINKS="$(FIND_LINKS)" $(UV) pip install --compile-bytecode

$(UV):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --progress-bar off uv==$(UV_VERSION)

# Reinstalls only when the dependency files change.
$(STAMP): pyproject.toml constraints.txt | $(UV)
	$(UV_INSTALL) --python $(PY) -c constraints.txt torch==2.13.0 -e '.[dev]'
	@touch $@

# The sandbox child's interpreter for npu-target compile jobs (runner.sandbox.child_python('npu')
# finds it here; KERNELOPT_PYTHON_NPU overrides): triton-ascend replaces the `triton` package, so it
# cannot live in .venv. Reinstalls only when constraints-ascend.txt changes; about 15 s.
# torch-npu lies beside it in $(ASCEND_VENV)/torch-npu, off sys.path (see constraints-ascend.txt).
ascend: $(ASCEND_STAMP)

# Both environments at once: about 38 s on a clean clone with uv's cache warm (pip: 67 s), 33-94 s
# with it empty, as fast as PyPI's downloads. make test and .ci/run start with it.
envs:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(ASCEND_STAMP)

$(ASCEND_STAMP): constraints-ascend.txt | $(UV)
	@test -n "$(ASCEND_PYTHON)" || { echo "make ascend: triton-ascend 3.2.0 needs python3.11 (set ASCEND_PYTHON)" >&2; exit 2; }
	@test -x $(ASCEND_PY) || $(ASCEND_PYTHON) -m venv $(ASCEND_VENV)
	$(UV_INSTALL) --python $(ASCEND_PY) -c constraints-ascend.txt triton-ascend torch numpy pybind11
	$(UV_INSTALL) --python $(ASCEND_PY) --no-deps --upgrade --target $(ASCEND_VENV)/torch-npu \
		-c constraints-ascend.txt torch-npu
	@touch $@

run: $(STAMP) bubblewrap
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput -v 0
	$(PY) manage.py loaddemo --address http://$(ADDRESS)/
	@echo
	@echo "kernelopt is starting on http://$(ADDRESS)/  (log in as demo / kernelopt-demo; Ctrl-C stops it)"
	$(PY) manage.py serve $(ADDRESS) --noreload

# A separate worker for the queues in QUEUES; needs a real broker (BROKER_URL=amqp://... or redis://...)
# and the same DATABASE_URL as the web process.
worker: $(STAMP) bubblewrap
	@if [ -z "$${BROKER_URL:-}" ]; then echo "make worker: set BROKER_URL (amqp://guest:guest@127.0.0.1:5672/ or redis://127.0.0.1:6379/0); without it the web process runs the embedded worker" >&2; exit 2; fi
	$(PY) manage.py rundramatiq --processes 1 --threads 1 --queues $(QUEUES)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

chromium:
	@command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# The sandbox of every job (runner/sandbox): bubblewrap, and libseccomp for its filter.
bubblewrap:
	@{ command -v bwrap >/dev/null && /sbin/ldconfig -p | grep -q 'libseccomp\.so\.2 '; } || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y bubblewrap libseccomp2)

define CHECK_DB
import os, sys
from urllib.parse import unquote, urlparse
import psycopg
from psycopg import sql
u = urlparse(os.environ["DATABASE_URL"])
name = unquote(u.path.lstrip("/"))
where = f"{u.hostname}:{u.port or 5432}"
try:
    conn = psycopg.connect(host=u.hostname, port=u.port or 5432, user=unquote(u.username or "") or None,
                           password=unquote(u.password or "") or None, dbname="postgres",
                           connect_timeout=5, autocommit=True)
except psycopg.OperationalError as exc:
    sys.exit(f"make test: PostgreSQL at {where} is not reachable ({exc}); start it or set DATABASE_URL")
with conn:
    if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        print(f"created database {name}")
print(f"PostgreSQL reachable at {where}; tests use the database test_{name}")
endef
export CHECK_DB

testdb: $(STAMP)
	@DATABASE_URL="$${DATABASE_URL:-$(TEST_DATABASE_URL)}" $(PY) -c "$$CHECK_DB"

# pytest's exit status 5 means it collected no test: that is a failure here, said loudly.
# The Ascend tests run the sandbox child under .venv-ascend (npu-target compile jobs).
# TEST_WORKERS pytest-xdist workers (each with its own test database, test_<name>_gwN);
# TEST_WORKERS=0 runs in one process. PYTEST_ARGS go last, so they can override -n too.
# Three workers on the 2-core CI machine: the suite waits in places (sandbox wall clocks, hangs
# answered at their deadline, a browser loading a page, a worker killed and requeued), where a
# third worker keeps the cores busy. 2026-12-07, a clone of c5c782a: 586-610 s of pytest with
# two, 563 s with three (0.8 % of the CPU idle).
test: export KERNELOPT_PYTHON_NPU := $(CURDIR)/$(ASCEND_PY)
test: export KERNELOPT_ASCEND_PYTHON := $(CURDIR)/$(ASCEND_PY)
test: envs chromium bubblewrap testdb
	@export DATABASE_URL="$${DATABASE_URL:-$(TEST_DATABASE_URL)}"; \
	$(VENV)/bin/pytest -m "not gpu" -n $(TEST_WORKERS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: FAILED: pytest collected no tests (exit status 5)" >&2; exit 1; fi; \
	exit $$rc
