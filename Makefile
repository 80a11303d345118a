# The two commands the README gives: `make demo` and `make test`. Each sets up what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION := python
export SPARK_LOCAL_IP := 127.0.0.1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: install test lint fmt demo bench bench-codec clean

# uv resolves this dependency set in seconds; pip's resolver backtracks for minutes into ancient sdists.
$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

$(STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/pytest tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

demo: $(STAMP)
	$(BIN)/kafscale-iceberg demo

bench: bench-codec

bench-codec: $(STAMP)
	$(BIN)/python -m bench.codec

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
