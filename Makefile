# The two commands a newcomer runs: `make up` and `make test` (`make demo` is the tour).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Playwright (the browser tests) uses the system's Chromium: never download a browser.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.PHONY: test-durations up demo test lint typecheck bytecode pytest prerequisites venv venv-dev clean schema coverage bench-hotpath

# `make demo` installs only what the main job needs (the package and its runtime
# dependencies), and shows pip's progress so the install is never silent.
$(VENV)/.installed-main: pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing toolsafe and its runtime dependencies into $(VENV)"
	$(BIN)/pip install --progress-bar on --disable-pip-version-check -e .
	@touch $@

# `make test` adds the dev extra: linters, type checker, test tools, every integration.
# uv installs it (the same requirements, resolved to the same versions, bytecode compiled
# as pip does) in a third of pip's time; pip is the fallback when uv cannot be installed.
$(VENV)/.installed-dev: pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing toolsafe with the dev extra into $(VENV)"
	@if $(BIN)/pip install --disable-pip-version-check --quiet uv; then \
		echo "$(BIN)/uv pip install --compile-bytecode -e '.[dev]'"; \
		$(BIN)/uv pip install --python $(BIN)/python --compile-bytecode -e '.[dev]'; \
	else \
		echo "uv could not be installed; installing with pip"; \
		$(BIN)/pip install --progress-bar on --disable-pip-version-check -e '.[dev]'; \
	fi
	@touch $(VENV)/.installed-main $(VENV)/.installed-up $@

# `make up` installs only what the main job needs: the package and the gateway extra.
$(VENV)/.installed-up: pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing toolsafe with the gateway extra into $(VENV)"
	$(BIN)/pip install --progress-bar on --disable-pip-version-check -e '.[gateway]'
	@touch $(VENV)/.installed-main $@

venv: $(VENV)/.installed-main

venv-dev: $(VENV)/.installed-dev

# The gateway, its status page, a worker and beat (and the example downstream) on the
# embedded default in ./toolsafe-up; Ctrl-C stops them. Options: make up UP_ARGS="--port 9000"
UP_ARGS ?= --example

up: $(VENV)/.installed-up
	$(BIN)/toolsafe up $(UP_ARGS)

demo: venv
	$(BIN)/toolsafe demo

# What the tests need outside Python (Chromium, redis-server, PostgreSQL's binaries,
# procps, runuser): installed as root with apt-get, else named in one line, and Redis and
# PostgreSQL answering (.ci/prerequisites).
prerequisites: venv-dev
	@PYTHON=$(BIN)/python sh .ci/prerequisites

# mypy keeps one core busy; the other meanwhile writes the bytecode caches every pytest
# worker reads (the test modules, assertion-rewritten, and toolsafe's), so that each
# worker's collection then costs half the CPU.
test: venv-dev prerequisites lint
	@$(MAKE) --no-print-directory -j2 typecheck bytecode
	@$(MAKE) --no-print-directory pytest

bytecode: venv-dev
	@$(PYTEST_ENV) $(BIN)/pytest --collect-only -q -p no:cacheprovider > /dev/null \
		&& echo "bytecode caches written (pytest --collect-only)"

lint: venv-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv-dev
	$(BIN)/mypy toolsafe tests benchmarks

# In parallel (pytest-xdist): each worker has its own PostgreSQL database, Redis db number,
# ports and temporary folders; the tests of one file stay on one worker (a module's
# cluster starts once), and the `serial` ones share one worker, one after another
# (tests/conftest.py, xdist_scope). PYTEST_PARALLEL= runs in one process. Five workers on
# two cores: a process test spends much of its time waiting on leases, sweeps and its
# workers, and the extra workers fill those waits (docs/architecture.md).
PYTEST_WORKERS  ?= 5
PYTEST_PARALLEL ?= -n $(PYTEST_WORKERS) --dist loadscope
# The suite starts a few hundred interpreters (workers, CLIs, benchmark programs) and each
# xdist worker imports every test module: with PYTHONDONTWRITEBYTECODE set (containers
# often set it), each of them compiles toolsafe's and the tests' sources again. The test
# run writes the bytecode caches (__pycache__, ignored by git) whatever the shell says.
PYTEST_ENV ?= env -u PYTHONDONTWRITEBYTECODE
pytest: venv-dev
	$(PYTEST_ENV) $(BIN)/pytest -W error $(PYTEST_PARALLEL) --durations=25 $(PYTEST_ARGS)

# Measure each work unit again into tests/support/durations.json, which orders the units longest
# first (tests/support/schedule.py); commit the table after a run on a quiet machine.
test-durations: venv-dev
	$(PYTEST_ENV) TOOLSAFE_TEST_DURATIONS=tests/support/durations.json \
		$(BIN)/pytest -W error $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The suite under coverage, subprocesses included (docs/coverage.md).
coverage: venv-dev
	rm -rf .coverage && mkdir -p .coverage
	$(BIN)/coverage run -m pytest -W error $(PYTEST_ARGS)
	$(BIN)/coverage combine -q
	$(BIN)/coverage report

schema: venv
	$(BIN)/toolsafe schema > adapters/schema/envelope.schema.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .coverage

# The benchmarks of DESIGN §10 (docs/benchmarks.md): several minutes against the real
# Redis (database 12) and PostgreSQL (database toolsafe_bench, created and dropped).
# Extra options for every program: make bench BENCH_ARGS="--broker redis://127.0.0.1:6379/13"
.PHONY: bench
BENCH_ARGS ?=

bench: venv-dev
	$(BIN)/python -m benchmarks.throughput --repeat 3 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.recovery_latency $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.sweeper_cost $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.lost_hints --rounds 2 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.wal_per_step $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.profile_step --top 12 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.gateway $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.metrics_scrape $(BENCH_ARGS)

# The hot-path issue's targets, each printed as met / not met (docs/benchmarks.md).
bench-hotpath: venv-dev
	$(BIN)/python -m benchmarks.throughput --steps 1500 --repeat 3 --modes noop,rows,toolsafe,relay $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.paired_drain $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.submit_cost --calls 3000 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.relay_latency $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.eta_memory $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.eta_lateness --rounds 3 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.throughput --steps 1000 --modes rows,toolsafe --store sqlite $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.sweeper_cost $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.lost_hints --rounds 2 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.wal_per_step $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.gateway $(BENCH_ARGS)
