"""The `schema_registry` fixture: the in-process registry (`kafscale_iceberg/local/schema_registry.py`)
as the tests' stand-in for a Confluent schema registry, which no server installs here to provide."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafscale_iceberg.local.schema_registry import StandInRegistry, serve_registry

__all__ = ["StandInRegistry", "schema_registry"]


@pytest.fixture
def schema_registry() -> Iterator[StandInRegistry]:
    """A stand-in Confluent registry on a free loopback port (see `local/schema_registry.py`)."""
    with serve_registry() as registry:
        yield registry
