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
	$(BIN)/mypy adapters recovery tasks celeryconfig.py

pytest: venv
	$(BIN)/pytest -W error $(PYTEST_ARGS)

schema: venv
	$(BIN)/toolsafe schema > adapters/schema/envelope.schema.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
