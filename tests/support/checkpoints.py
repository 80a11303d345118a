"""The checkpoint store under test, both ways: SQLite, and a real etcd (one key prefix per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.ports import CheckpointStore
from tests.support.etcd import EtcdServer


@pytest.fixture(params=["sqlite", "etcd"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    """Each test using it runs twice: on the SQLite store, then on etcd."""
    if request.param == "sqlite":
        yield SqliteCheckpointStore(tmp_path / "checkpoints.db")
        return
    server: EtcdServer = request.getfixturevalue("etcd_server")
    etcd = EtcdCheckpointStore([server.url], key_prefix=f"test-{uuid4().hex[:8]}")
    yield etcd
    etcd.close()
