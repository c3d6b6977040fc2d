# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint typecheck pytest venv clean schema

$(BIN)/toolsafe: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

venv: $(BIN)/toolsafe

demo: venv
	$(BIN)/toolsafe demo

test: venv lint typecheck pytest

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy toolsafe tests benchmarks

pytest: venv
	$(BIN)/pytest -W error $(PYTEST_ARGS)

schema: venv
	$(BIN)/toolsafe schema > adapters/schema/envelope.schema.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# The benchmarks of DESIGN §10 (docs/benchmarks.md): several minutes against the real
# Redis (database 12) and PostgreSQL (database toolsafe_bench, created and dropped).
# Extra options for every program: make bench BENCH_ARGS="--broker redis://127.0.0.1:6379/13"
.PHONY: bench
BENCH_ARGS ?=

bench: venv
	$(BIN)/python -m benchmarks.throughput --repeat 3 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.recovery_latency $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.sweeper_cost $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.profile_step --top 12 $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.gateway $(BENCH_ARGS)
