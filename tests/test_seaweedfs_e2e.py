"""The product end to end with SeaweedFS as both S3 and the Iceberg REST catalog, as a user runs it.

`kafscale-iceberg run --once` (the inline runner), `replay --reset-offsets`, `maintain --compact` and
an upsert topic, through the CLI in this process, against SeaweedFS (`weed mini`): the segments and
the runs' documents in a normal bucket, the tables in a table bucket (which refuses any object
outside a table, as Amazon S3 Tables does), the catalog reached with OAuth2 client credentials.
SeaweedFS renumbers a new table's nested field ids, so a nested column is mapped on purpose.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest
import yaml
from pyiceberg.table import Table

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import field_ids_by_path
from kafscale_iceberg.cli import main
from kafscale_iceberg.config import KafscaleConfig, load_config
from kafscale_iceberg.domain.field_ids import TopicFieldIds, field_ids_uri
from kafscale_iceberg.domain.table_locations import is_under
from kafscale_iceberg.local.config_document import one_machine_document
from kafscale_iceberg.local.seaweedfs import EmbeddedSeaweedFS
from tests.support.seaweedfs import TableBucket, seaweedfs_client
from tests.support.segments import put_segment

# Whole runs through the CLI: `make test` (not the fast loop).
pytestmark = pytest.mark.slow

NAMESPACE, TOPIC, TABLE = "prod", "orders", "shop.orders"
COLUMNS = [
    {"name": "order_id", "type": "long", "required": True},
    {
        "name": "customer",
        "type": "struct",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "tags", "type": "list", "element": {"type": "string"}},
        ],
    },
]


def order(offset: int) -> bytes:
    return json.dumps(
        {"order_id": offset, "customer": {"name": f"c{offset}", "tags": [f"t{offset % 3}"]}}
    ).encode()


class Lake:
    """A config file over SeaweedFS: segments and runs in `plain`, tables in `tables`."""

    def __init__(
        self,
        server: EmbeddedSeaweedFS,
        tables: TableBucket,
        plain: str,
        tmp_path: Path,
        *,
        warehouse: str | None = None,
        mapping: dict[str, Any] | None = None,
        maintenance: dict[str, Any] | None = None,
    ) -> None:
        self.s3: Any = seaweedfs_client(server, "s3")
        self.bucket = plain
        document = one_machine_document(
            tmp_path,
            bucket=plain,
            namespace=NAMESPACE,
            endpoint=server.s3_url,
            region=server.region,
            iceberg={
                "catalog": {
                    "type": "rest",
                    "uri": server.iceberg_url,
                    # A table bucket's ARN means SigV4 (derived), with the process's credentials.
                    **(
                        {}
                        if (warehouse or "").startswith("arn:")
                        else {"username": server.access_key, "password": server.secret_key}
                    ),
                    "properties": {
                        "s3.access-key-id": server.access_key,
                        "s3.secret-access-key": server.secret_key,
                    },
                },
                "warehouse": warehouse or tables.warehouse,
            },
            runs={"location": f"s3://{plain}/runs", "min_bytes_per_run": 0, "retry_backoff_seconds": 0},
            runner={"type": "inline", "inline": {"workers": 2}},
            offsets={"lease_ttl_seconds": 5},
            **({"maintenance": maintenance} if maintenance else {}),
            mappings=[
                mapping
                or {
                    "topic": TOPIC,
                    "table": TABLE,
                    "create_table_if_missing": True,
                    "schema": {"columns": COLUMNS},
                }
            ],
        )
        self.path = tmp_path / "kafscale.yaml"
        self.path.write_text(yaml.safe_dump(document))
        self.config: KafscaleConfig = load_config(self.path)
        self.next: dict[int, int] = {}

    def put(self, partition: int, values: list[bytes | None], keys: list[bytes | None] | None = None) -> None:
        base = self.next.get(partition, 0)
        options: dict[str, Any] = {"values": values} if keys is None else {"values": values, "keys": keys}
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, partition, base, len(values), **options)
        self.next[partition] = base + len(values)

    def cli(self, *argv: str) -> int:
        return main([argv[0], "--config", str(self.path), *argv[1:]])

    def table(self) -> Table:
        return load_iceberg_catalog(CatalogSettings.from_config(self.config)).load_table(TABLE)

    def keys(self) -> list[tuple[int, int]]:
        rows = self.table().scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
        return sorted((r["partition"], r["offset"]) for r in rows)

    def file_ids(self, uri: str) -> dict[str, int]:
        """The Parquet field ids of a data file's top-level columns (none: {})."""
        bucket, key = uri.removeprefix("s3://").split("/", 1)
        body = self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        schema = pq.read_schema(io.BytesIO(body))
        return {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema if f.metadata}


@pytest.fixture
def seaweed_env(seaweedfs: EmbeddedSeaweedFS, monkeypatch: pytest.MonkeyPatch) -> EmbeddedSeaweedFS:
    """The process's AWS credentials are SeaweedFS's (segments and documents use the default chain)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweedfs.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweedfs.secret_key)
    # boto3's default session keeps the first credentials it resolved in this worker (another
    # test's): clients made from now on resolve these.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setenv("KAFSCALE_METRICS_ADDR", "127.0.0.1:0")
    return seaweedfs


@pytest.fixture
def lake(
    seaweed_env: EmbeddedSeaweedFS, table_bucket: TableBucket, plain_bucket: str, tmp_path: Path
) -> Lake:
    return Lake(seaweed_env, table_bucket, plain_bucket, tmp_path)


def test_run_once_lands_every_record_under_the_tables_location_with_the_catalogs_field_ids(
    lake: Lake,
) -> None:
    lake.put(0, [order(o) for o in range(20)])
    lake.put(1, [order(o) for o in range(15)])

    assert lake.cli("run", "--once") == 0

    assert lake.keys() == [(0, o) for o in range(20)] + [(1, o) for o in range(15)]
    lake.put(0, [order(o) for o in range(20, 30)])
    assert lake.cli("run", "--once") == 0
    assert lake.keys() == [(0, o) for o in range(30)] + [(1, o) for o in range(15)]
    table = lake.table()
    files = [task.file.file_path for task in table.scan().plan_files()]
    assert files
    assert all(is_under(uri, table.location()) for uri in files)
    # The first run's files carry no ids (the catalog assigned the new table's); the second run's
    # carry the table's ids as the catalog returned them.
    top_level = {f.name: f.field_id for f in table.schema().fields}
    with_ids = [lake.file_ids(uri) for uri in files if lake.file_ids(uri)]
    assert with_ids
    assert all(ids == top_level for ids in with_ids)
    recorded = TopicFieldIds.model_validate_json(
        lake.s3.get_object(Bucket=lake.bucket, Key=field_ids_uri("runs", TOPIC))["Body"].read()
    ).table(TABLE)
    assert recorded is not None
    assert recorded.field_ids == field_ids_by_path(table.schema())
    assert recorded.data_location == f"{table.location()}/data"


def test_a_warehouse_named_by_its_table_bucket_arn_lands_everything_once_after_one_refused_run(
    seaweed_env: EmbeddedSeaweedFS, table_bucket: TableBucket, plain_bucket: str, tmp_path: Path
) -> None:
    lake = Lake(seaweed_env, table_bucket, plain_bucket, tmp_path, warehouse=table_bucket.arn)
    lake.put(0, [order(o) for o in range(10)])

    assert lake.cli("run", "--once") == 0

    assert lake.keys() == [(0, o) for o in range(10)]
    table = lake.table()
    assert all(is_under(t.file.file_path, table.location()) for t in table.scan().plan_files())
    assert len(table.snapshots()) == 1


@pytest.mark.parametrize("runner", ["inline", "local"])
def test_the_documented_seaweedfs_config_runs_end_to_end(
    seaweed_env: EmbeddedSeaweedFS, table_bucket: TableBucket, plain_bucket: str, tmp_path: Path, runner: str
) -> None:
    """docs/seaweedfs.md's config as written, but for this test's ports, buckets and folder, with the
    inline runner and with local Spark (`runner.type: local`)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "seaweedfs.md").read_text()
    document = yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    catalog = document["iceberg"]["catalog"]
    assert (catalog["username"], catalog["password"]) == (seaweed_env.access_key, seaweed_env.secret_key)
    assert document["runner"]["type"] == "inline"
    document["s3"] |= {"endpoint": seaweed_env.s3_url, "bucket": plain_bucket}
    catalog["uri"] = seaweed_env.iceberg_url
    document["iceberg"]["warehouse"] = table_bucket.warehouse
    document["runs"]["location"] = f"s3://{plain_bucket}/runs"
    document["offsets"]["sqlite_path"] = str(tmp_path / "offsets.sqlite")
    document["runner"]["type"] = runner
    lake = Lake(seaweed_env, table_bucket, plain_bucket, tmp_path)
    lake.path.write_text(yaml.safe_dump(document))
    lake.config = load_config(lake.path)
    lake.put(0, [order(o) for o in range(6)])
    lake.put(1, [order(o) for o in range(4)])

    if runner == "inline":
        assert lake.cli("run", "--once") == 0
    else:
        # As a user runs it: its own process and JVM, whose Python workers take this environment's
        # (SeaweedFS's) credentials. In this process a test worker's JVM may already run, its
        # workers' environment fixed at its start with another server's credentials.
        argv = [sys.executable, "-m", "kafscale_iceberg.cli", "run", "--config", str(lake.path), "--once"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

    assert lake.keys() == [(0, o) for o in range(6)] + [(1, o) for o in range(4)]
    table = lake.table()
    assert table.location().startswith(f"{table_bucket.warehouse}/shop")
    files = [t.file.file_path for t in table.scan().plan_files()]
    assert files
    assert all(is_under(uri, f"{table.location()}/data/kafscale/") for uri in files)


@pytest.mark.parametrize("by_arn", [True, False], ids=["table-bucket-arn", "s3-warehouse"])
def test_orphan_cleanup_is_left_to_s3_tables_when_the_warehouse_is_a_table_bucket_arn(
    seaweed_env: EmbeddedSeaweedFS,
    table_bucket: TableBucket,
    plain_bucket: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    by_arn: bool,
) -> None:
    """S3 Tables refuses listing a table bucket's storage and removes unreferenced files itself, so an
    ARN warehouse's `maintain` defers the step and says so; the same bucket named `s3://` is cleaned."""
    warehouse = table_bucket.arn if by_arn else table_bucket.warehouse
    lake = Lake(
        seaweed_env,
        table_bucket,
        plain_bucket,
        tmp_path,
        warehouse=warehouse,
        maintenance={"orphan_grace": 0},
    )
    lake.put(0, [order(o) for o in range(5)])
    assert lake.cli("run", "--once") == 0
    table = lake.table()
    stray_uri = f"{table.location()}/data/kafscale/abandoned-run/part-0.parquet"
    bucket, key = stray_uri.removeprefix("s3://").split("/", 1)
    lake.s3.put_object(Bucket=bucket, Key=key, Body=b"left by a run that died")
    capsys.readouterr()

    assert lake.cli("maintain") == 0

    out = capsys.readouterr().out
    left = lake.s3.list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount", 0)
    if by_arn:
        assert "orphan files  left to Amazon S3 Tables (its unreferenced-file removal)" in out
        assert left == 1
    else:
        assert "orphan files  did delete 1" in out
        assert left == 0
    assert lake.keys() == [(0, o) for o in range(5)]


def test_replay_with_an_offset_reset_and_a_compaction_keep_every_record_once(lake: Lake) -> None:
    for _ in range(3):
        lake.put(0, [order(o) for o in range(lake.next.get(0, 0), lake.next.get(0, 0) + 5)])
        assert lake.cli("run", "--once") == 0

    assert lake.cli("replay", "--topic", TOPIC, "--from-offset", "8", "--reset-offsets", "--yes") == 0
    assert lake.cli("run", "--once") == 0
    assert lake.keys() == [(0, o) for o in range(15)]

    assert lake.cli("maintain", "--compact") == 0
    table = lake.table()
    assert lake.keys() == [(0, o) for o in range(15)]
    files = [t.file.file_path for t in table.scan().plan_files()]
    assert len(files) == 1  # the small files compacted into one
    assert all(is_under(uri, f"{table.location()}/data/kafscale/") for uri in files)


def test_an_upsert_topic_keeps_each_keys_last_state(
    seaweed_env: EmbeddedSeaweedFS, table_bucket: TableBucket, plain_bucket: str, tmp_path: Path
) -> None:
    mapping = {
        "topic": TOPIC,
        "table": TABLE,
        "mode": "upsert",
        "upsert": {"key": ["id"]},
        "create_table_if_missing": True,
        "schema": {
            "columns": [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"}]
        },
    }
    lake = Lake(seaweed_env, table_bucket, plain_bucket, tmp_path, mapping=mapping)

    def change(key: int, name: str | None) -> tuple[bytes, bytes | None]:
        value = None if name is None else json.dumps({"id": key, "name": name}).encode()
        return json.dumps({"id": key}).encode(), value

    first = [change(1, "a"), change(2, "b"), change(1, "a2")]
    lake.put(0, [v for _, v in first], keys=[k for k, _ in first])
    assert lake.cli("run", "--once") == 0
    second = [change(2, None), change(3, "c")]
    lake.put(0, [v for _, v in second], keys=[k for k, _ in second])
    assert lake.cli("run", "--once") == 0

    rows = lake.table().scan(selected_fields=("id", "name")).to_arrow().to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows) == [(1, "a2"), (3, "c")]
