# The two commands the README gives: `make demo` and `make test`. Each sets up what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION := python
export SPARK_LOCAL_IP := 127.0.0.1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: install test lint fmt demo bench bench-codec bench-commit bench-spark clean

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

# The end-to-end demo needs the one-machine runtime (`kafscale-iceberg run` / `demo`), not built yet.
demo: $(STAMP)
	@echo "make demo: the end-to-end demo arrives with the one-machine runtime (kafscale-iceberg demo)," >&2
	@echo "which is not built yet. Until then: make test, or .venv/bin/kafscale-iceberg segments --help." >&2
	@exit 2

bench: bench-codec bench-commit bench-spark

bench-codec: $(STAMP)
	$(BIN)/python -m bench.codec

bench-commit: $(STAMP)
	$(BIN)/python -m bench.commit

bench-spark: $(STAMP)
	$(BIN)/python -m bench.spark

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
