"""Table buckets (Amazon S3 Tables, SeaweedFS) hold tables only: what the product refuses early there.

A table bucket answers AccessDenied to any object outside a table, so the runs' documents (plans,
results, `field-ids.json`) cannot live in it: `runs.location` inside one is refused by the config
check (an S3 Tables bucket is named `…--table-s3`) or, for any other table bucket, on the first
request, as a `ConfigError` naming `runs.location` rather than an outage retried forever.
"""

from __future__ import annotations

import re
from pathlib import Path

import boto3
import pytest

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import (
    CatalogSettings,
    catalog_properties,
    load_iceberg_catalog,
)
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import parse_config
from kafscale_iceberg.domain.commits import TableSpec
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.exceptions import ConfigError, ConfigValidationError
from kafscale_iceberg.local.seaweedfs import EmbeddedSeaweedFS
from tests.support.iceberg_runs import data_rows
from tests.support.seaweedfs import TableBucket, seaweedfs_client

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
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # not another test's cached credentials
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


def _catalog_yaml(catalog: str, warehouse: str) -> str:
    return f"s3: {{bucket: segments}}\niceberg: {{catalog: {catalog}, warehouse: '{warehouse}'}}\n" + (
        "runs: {location: 's3://segments/runs'}\n" + MAPPING
    )


def test_an_s3_tables_warehouse_is_reached_through_its_iceberg_endpoint_signed_for_s3tables() -> None:
    arn = "arn:aws:s3tables:eu-west-1:111122223333:bucket/lake"

    config = parse_config(_catalog_yaml("{type: rest}", arn), source="test")

    properties = catalog_properties(CatalogSettings.from_config(config))
    assert properties["uri"] == "https://s3tables.eu-west-1.amazonaws.com/iceberg"
    assert properties["warehouse"] == arn
    assert properties["rest.sigv4-enabled"] == "true"
    assert properties["rest.signing-name"] == "s3tables"
    assert properties["rest.signing-region"] == "eu-west-1"
    assert "token" not in properties
    assert "credential" not in properties


ARN = "arn:aws:s3tables:us-east-1:111122223333:bucket/lake"


@pytest.mark.parametrize(
    ("catalog", "warehouse", "key"),
    [
        ("{type: rest, uri: 'https://c', token: t, sigv4: true}", "s3://w", "iceberg.catalog.sigv4"),
        ("{type: sql, uri: 'sqlite:///c.db', sigv4: true}", "s3://w", "iceberg.catalog.sigv4"),
        ("{type: rest, uri: 'https://c', signing_name: s3tables}", "s3://w", "iceberg.catalog.signing_name"),
        (
            "{type: rest, uri: 'https://s3tables.us-east-1.amazonaws.com/iceberg', token: t}",
            ARN,
            "iceberg.catalog.sigv4",
        ),
        ("{type: glue}", ARN, "iceberg.catalog.type"),
    ],
)
def test_a_catalog_authenticated_two_ways_or_an_s3_tables_one_unsigned_is_refused_naming_the_key(
    catalog: str, warehouse: str, key: str
) -> None:
    with pytest.raises(ConfigValidationError) as raised:
        parse_config(_catalog_yaml(catalog, warehouse), source="test")

    assert key in str(raised.value)


@pytest.mark.parametrize("secret_ok", [True, False])
def test_sigv4_signed_for_s3tables_reaches_a_table_bucket_and_a_bad_secret_names_the_key(
    seaweedfs: EmbeddedSeaweedFS, table_bucket: TableBucket, secret_ok: bool
) -> None:
    secret = seaweedfs.secret_key if secret_ok else "wrong-secret"
    catalog = (
        f"{{type: rest, uri: '{seaweedfs.iceberg_url}', sigv4: true, signing_name: s3tables, "
        f"signing_region: {seaweedfs.region}, properties: {{client.access-key-id: {seaweedfs.access_key}, "
        f"client.secret-access-key: {secret}, s3.access-key-id: {seaweedfs.access_key}, "
        f"s3.secret-access-key: {seaweedfs.secret_key}}}}}"
    )
    text = _catalog_yaml(catalog, table_bucket.arn).replace(
        "s3: {bucket: segments}",
        f"s3: {{bucket: segments, endpoint: '{seaweedfs.s3_url}', path_style: true}}",
    )
    settings = CatalogSettings.from_config(parse_config(text, source="test"))

    if not secret_ok:
        with pytest.raises(ConfigError, match=r"iceberg\.catalog"):
            IcebergTableCommitter(load_iceberg_catalog(settings)).list_tables("lake")
        return
    tables = IcebergTableCommitter(load_iceberg_catalog(settings))
    tables.ensure_table(TableSpec(identifier="lake.orders", fields=table_fields(()), create_if_missing=True))
    # The server's /v1/config prefix (the bucket) was taken; the table lives in its table bucket.
    assert (tables.field_ids("lake.orders").data_location or "").startswith(f"s3://{table_bucket.name}/")


def test_maintain_leaves_compaction_to_s3_tables_where_it_is_on_and_status_says_so(
    seaweedfs: EmbeddedSeaweedFS, table_bucket: TableBucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweedfs.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweedfs.secret_key)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # not another test's cached credentials
    catalog = (
        f"{{type: rest, uri: '{seaweedfs.iceberg_url}', properties: "
        f"{{s3.access-key-id: {seaweedfs.access_key}, s3.secret-access-key: {seaweedfs.secret_key}}}}}"
    )
    text = (
        _catalog_yaml(catalog, table_bucket.arn)
        .replace(
            "s3: {bucket: segments}",
            f"s3: {{bucket: segments, endpoint: '{seaweedfs.s3_url}', path_style: true}}",
        )
        .replace(
            "mappings: [{topic: orders, table: lake.orders}]",
            "mappings: [{topic: orders, table: lake.orders}, {topic: refunds, table: lake.refunds}]",
        )
        .replace("/tmp/o.db", str(tmp_path / "offsets.db"))
    )
    assembly = Assembly(parse_config(text, source="test"))
    for table in ("lake.orders", "lake.refunds"):
        assembly.tables.ensure_table(
            TableSpec(identifier=table, fields=table_fields(()), create_if_missing=True)
        )
        loaded = load_iceberg_catalog(CatalogSettings.from_config(assembly.config)).load_table(table)
        for offsets in (range(0, 3), range(3, 6)):
            loaded.append(data_rows(table.split(".")[1], 0, offsets, ()))
    seaweedfs_client(seaweedfs, "s3tables").put_table_maintenance_configuration(
        tableBucketARN=table_bucket.arn,
        namespace="lake",
        name="orders",
        type="icebergCompaction",
        value={"status": "enabled", "settings": {"icebergCompaction": {"targetFileSizeMB": 128}}},
    )

    report = assembly.maintenance.maintain(force_compaction=True)

    compacted = {t.table: t.compaction for t in report.tables if t.table in ("lake.orders", "lake.refunds")}
    assert compacted["lake.orders"] is None  # S3 Tables compacts it
    assert compacted["lake.refunds"] is not None
    assert compacted["lake.refunds"].committed
    health = assembly.table_maintainer.health("lake.orders", small_file_bytes=1 << 20)
    assert health.managed_compaction
    assert health.files == 2
    assert not assembly.table_maintainer.health("lake.refunds", small_file_bytes=1 << 20).managed_compaction


def test_the_seaweedfs_config_in_the_docs_is_valid() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "seaweedfs.md").read_text()
    document = text.split("```yaml\n", 1)[1].split("```", 1)[0]

    config = parse_config(document, source="docs/seaweedfs.md")

    assert config.iceberg.catalog.type == "rest"
    assert config.runs.location == "s3://kafscale-data/runs"


def test_the_documented_rest_and_s3_tables_configs_load_as_described() -> None:
    """The three setups of configuration.md's "REST catalogs and Amazon S3 Tables", each with a bucket,
    etcd and a mapping added, give the catalog properties the text says."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    section = text.split("#### REST catalogs and Amazon S3 Tables", 1)[1]
    section = section.split("#### Where data files go", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 3
    rest = "s3: {bucket: kafscale-data}\netcd: {endpoints: ['http://127.0.0.1:2379']}\n"
    rest += "mappings: [{topic: orders, table: shop.orders}]\n"
    configs = [parse_config(rest + b, source="docs/configuration.md", environ={}) for b in blocks]
    oauth2, bearer, s3tables = (catalog_properties(CatalogSettings.from_config(c)) for c in configs)

    assert [c.unknown_keys for c in configs] == [(), (), ()]
    assert [c.runs.location for c in configs] == ["s3://kafscale-runs/runs"] * 3
    assert oauth2["credential"] == "kafscale-client:CLIENT-SECRET"
    assert oauth2["oauth2-server-uri"] == "https://catalog.example.com/api/catalog/v1/oauth/tokens"
    assert oauth2["scope"] == "PRINCIPAL_ROLE:ALL"
    assert bearer["token"] == "TOKEN"
    assert s3tables["uri"] == "https://s3tables.eu-west-1.amazonaws.com/iceberg"
    assert s3tables["warehouse"] == "arn:aws:s3tables:eu-west-1:123456789012:bucket/kafscale-lake"
    assert (s3tables["rest.sigv4-enabled"], s3tables["rest.signing-name"]) == ("true", "s3tables")
    assert s3tables["rest.signing-region"] == "eu-west-1"
    assert configs[2].iceberg.in_table_bucket
    assert not configs[0].iceberg.in_table_bucket
