"""What the commit step asks of S3 when the warehouse is there: the table loaded once, each metadata
file written with one PUT (real moto server behind `bench.s3_proxy.LatencyProxy` with no added
latency, which records each request line; SQLite catalog, SQLite checkpoint store)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.s3_proxy import LatencyProxy
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.commits import TableSpec
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from tests.support.iceberg_runs import RunFactory
from tests.support.moto import MotoEndpoint

TABLE, DLQ = "lake.orders", "lake.orders__dlq"


@pytest.fixture
def proxy(moto_server: MotoEndpoint) -> Iterator[LatencyProxy]:
    with LatencyProxy.for_url(moto_server.url, latency_s=0.0, bandwidth_bytes_per_s=1e12) as started:
        yield started


def _tables_on_s3(moto_server: MotoEndpoint, proxy: LatencyProxy, tmp_path: Path) -> IcebergTableCommitter:
    """A SQLite catalog whose warehouse is in a fresh bucket, reached through the proxy."""
    settings = CatalogSettings(
        type="sql",
        uri=f"sqlite:///{tmp_path}/catalog.db",
        warehouse=f"s3://{moto_server.new_bucket()}/warehouse",
        s3_endpoint=proxy.url,
        s3_region=moto_server.region,
        s3_path_style=True,
    )
    return IcebergTableCommitter(load_iceberg_catalog(settings))


def _claim(store: SqliteCheckpointStore, topic: str, run_id: str) -> LeaseGrant:
    lease = store.claim_lease(topic, owner_id="test", run_id=run_id)
    assert isinstance(lease, LeaseGrant)
    return lease


def _requests(proxy: LatencyProxy, since: int) -> list[list[str]]:
    """`[method, path]` of each request since the `since`-th line (a body's chunk sizes left out)."""
    return [line.split(" ")[:2] for line in proxy.request_lines[since:] if " HTTP/1.1" in line]


def test_a_commit_step_loads_the_table_once_and_puts_each_metadata_file_in_one_request(
    moto_server: MotoEndpoint, proxy: LatencyProxy, tmp_path: Path
) -> None:
    tables = _tables_on_s3(moto_server, proxy, tmp_path)
    runs = RunFactory(tmp_path, table=TABLE)
    plan = runs.plan({0: (-1, 9), 1: (-1, 4)})
    result = runs.result(plan, files_per_partition=2)  # data files local: only metadata goes to S3
    tables.ensure_table(TableSpec(TABLE, table_fields(plan.conversion.columns), create_if_missing=True))
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    lease = _claim(store, plan.topic, plan.run_id)
    before = len(proxy.request_lines)

    outcome = CommitService(tables, store).commit_run(plan, result, lease, TablePolicy())

    requests = _requests(proxy, before)
    metadata_reads = [
        path for method, path in requests if method == "GET" and path.endswith(".metadata.json")
    ]
    puts = [path for method, path in requests if method == "PUT"]
    assert outcome.table_committed
    # Ours, and the SQL catalog's own load inside its commit (a REST or Glue catalog does that server side).
    assert len(metadata_reads) == 2, requests
    assert not [path for method, path in requests if method == "POST"], requests  # no multipart upload
    assert len(puts) == 3, requests  # manifest, manifest list, metadata JSON
    assert not [path for method, path in requests if "list-type" in path], requests  # no existence check


def test_the_field_ids_recorded_after_a_commit_come_from_the_tables_it_read_and_made(
    moto_server: MotoEndpoint, proxy: LatencyProxy, tmp_path: Path
) -> None:
    """What the commit step writes to `field-ids.json` right after committing (`RunSteps`): the
    versions the commit read or made serve, no table is loaded again, and the ids are the tables'."""
    tables = _tables_on_s3(moto_server, proxy, tmp_path)
    runs = RunFactory(tmp_path, table=TABLE, dead_letter_table=DLQ)
    plan = runs.plan({0: (-1, 9)})
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    service = CommitService(tables, store)
    outcome = service.commit_run(
        plan,
        runs.result(plan, dead_letters={0: [4]}),
        _claim(store, plan.topic, plan.run_id),
        TablePolicy(create_table_if_missing=True),
    )
    before = len(proxy.request_lines)

    recorded = service.field_ids((TABLE, DLQ), outcome.states)

    assert _requests(proxy, before) == []
    assert recorded == service.field_ids((TABLE, DLQ))  # loaded
    assert [t.identifier for t in recorded.tables] == [TABLE, DLQ]


def test_manifest_lengths_are_known_from_the_write_without_asking_s3(
    moto_server: MotoEndpoint, proxy: LatencyProxy, tmp_path: Path
) -> None:
    """pyiceberg asked for each manifest's size with a HEAD after writing it; the length is now the
    bytes the stream wrote, and it must equal the object's size in S3 (the manifest list records it)."""
    bucket = moto_server.new_bucket()
    settings = CatalogSettings(
        type="sql",
        uri=f"sqlite:///{tmp_path}/catalog.db",
        warehouse=f"s3://{bucket}/warehouse",
        s3_endpoint=proxy.url,
        s3_region=moto_server.region,
        s3_path_style=True,
    )
    tables = IcebergTableCommitter(load_iceberg_catalog(settings))
    runs = RunFactory(tmp_path, table=TABLE)
    plan = runs.plan({0: (-1, 9)})
    result = runs.result(plan, files_per_partition=3)
    tables.ensure_table(TableSpec(TABLE, table_fields(plan.conversion.columns), create_if_missing=True))
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    before = len(proxy.request_lines)

    outcome = CommitService(tables, store).commit_run(
        plan, result, _claim(store, plan.topic, plan.run_id), TablePolicy()
    )

    assert outcome.table_committed
    heads = [path for method, path in _requests(proxy, before) if method == "HEAD"]
    assert len(heads) == 2, heads  # our load's and the catalog's: none for an .avro
    assert [path for path in heads if not path.endswith(".metadata.json")] == []
    table = load_iceberg_catalog(settings).load_table(TABLE)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    (manifest,) = snapshot.manifests(table.io)
    s3: Any = moto_server.client("s3")
    key = manifest.manifest_path.removeprefix(f"s3://{bucket}/")
    assert manifest.manifest_length == s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
    assert table.scan().to_arrow().num_rows == 10  # the manifest list and manifest read back
