"""Table buckets (Amazon S3 Tables, SeaweedFS) hold tables only: what the product refuses early there.

A table bucket answers AccessDenied to any object outside a table, so the runs' documents (plans,
results, `field-ids.json`) cannot live in it: `runs.location` inside one is refused by the config
check (an S3 Tables bucket is named `…--table-s3`) or, for any other table bucket, on the first
request, as a `ConfigError` naming `runs.location` rather than an outage retried forever.
"""

from __future__ import annotations

import boto3
import pytest

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.config import parse_config
from kafscale_iceberg.exceptions import ConfigError, ConfigValidationError
from kafscale_iceberg.local.seaweedfs import EmbeddedSeaweedFS
from tests.support.seaweedfs import TableBucket

MAPPING = (
    "mappings: [{topic: orders, table: lake.orders}]\noffsets: {backend: sqlite, sqlite_path: /tmp/o.db}\n"
)


def test_the_default_runs_location_in_an_s3_tables_bucket_is_refused_naming_the_key() -> None:
    text = (
        "s3: {bucket: segments}\n"
        "iceberg: {catalog: {type: rest, uri: 'https://catalog'}, warehouse: 's3://b1e2--table-s3'}\n"
        + MAPPING
    )

    with pytest.raises(ConfigValidationError) as raised:
        parse_config(text, source="test")

    message = str(raised.value)
    assert "runs.location" in message
    assert "table bucket" in message
    assert "_kafscale_runs" in message


def test_runs_location_in_a_normal_bucket_beside_an_arn_warehouse_is_accepted() -> None:
    text = (
        "s3: {bucket: segments}\n"
        "iceberg: {catalog: {type: rest, uri: 'https://s3tables.us-east-1.amazonaws.com/iceberg'},\n"
        "          warehouse: 'arn:aws:s3tables:us-east-1:111122223333:bucket/lake'}\n"
        "runs: {location: 's3://segments/kafscale-runs'}\n" + MAPPING
    )

    assert parse_config(text, source="test").runs.location == "s3://segments/kafscale-runs"


def test_a_run_document_in_a_table_bucket_is_a_config_error_naming_runs_location(
    seaweedfs: EmbeddedSeaweedFS, table_bucket: TableBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweedfs.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweedfs.secret_key)
    store = DocumentStore(S3Settings(endpoint_url=seaweedfs.s3_url, region=seaweedfs.region, path_style=True))
    uri = f"{table_bucket.warehouse}/_kafscale_runs/orders/field-ids.json"

    with pytest.raises(ConfigError) as on_write:
        store.write_text(uri, "{}")
    with pytest.raises(ConfigError) as on_read:
        store.read_text(uri)

    for raised in (on_write, on_read):
        assert raised.value.transient is False
        assert "runs.location" in str(raised.value)
        assert "normal bucket" in str(raised.value)
    listed = boto3.client(
        "s3",
        endpoint_url=seaweedfs.s3_url,
        aws_access_key_id=seaweedfs.access_key,
        aws_secret_access_key=seaweedfs.secret_key,
        region_name=seaweedfs.region,
    ).list_objects_v2(Bucket=table_bucket.name)
    assert listed.get("KeyCount", 0) == 0
