"""An S3 Tables deployment (`CatalogType=s3tables`) on the AWS box: segments land in a table bucket
through the real state machine, an EMR job (local Spark) and the commit function, and every call the
stack makes, its Iceberg REST catalog requests and its table-data requests included, is checked
against the S3 Tables actions of its role in template.yaml. SeaweedFS stands in for S3 Tables' Iceberg
REST endpoint and table bucket (tests/support/s3tables_box.py says what that covers)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from kafscale_iceberg.domain.table_locations import is_under
from kafscale_iceberg.local.seaweedfs import EmbeddedSeaweedFS
from tests.support.aws_box import Box, SparkBoxOpener
from tests.support.s3tables_box import S3TablesStandIn, rest_iam_requests, table_data_requests
from tests.support.seaweedfs import TableBucket
from tests.support.segments import put_segment

TOPIC, TABLE = "orders", "shop.orders"
ARN = "arn:aws:s3tables:us-east-1:123456789012:bucket/lake"


@pytest.fixture
def box(spark_box: SparkBoxOpener, seaweedfs: EmbeddedSeaweedFS, table_bucket: TableBucket) -> Iterator[Box]:
    stand_in = S3TablesStandIn(seaweedfs, table_bucket)
    with spark_box(
        mappings=[{"topic": TOPIC, "table": TABLE, "create_table_if_missing": True}], s3tables=stand_in
    ) as opened:
        yield opened


def _without(box: Box, policy: str, action: str) -> None:
    """A test copy of the template whose managed `policy` no longer grants `action`."""
    box.deployment.resources = copy.deepcopy(box.deployment.resources)
    for statement in box.deployment.resources[policy]["Properties"]["PolicyDocument"]["Statement"]:
        actions = statement["Action"]
        statement["Action"] = [a for a in ([actions] if isinstance(actions, str) else actions) if a != action]


def _actions(box: Box, role: str) -> set[str]:
    return {c.action for c in box.recorder.calls if c.role == role}


@pytest.mark.slow
@pytest.mark.aws
def test_an_s3_tables_deployment_lands_every_record_and_its_roles_allow_every_catalog_and_data_call(
    box: Box,
) -> None:
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 5)
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 1, 0, 3)
    box.pump()

    assert len(box.rows(TABLE)) == 8, box.describe()
    assert box.committed_offsets(TOPIC) == {0: 4, 1: 2}
    table = box.catalog().load_table(TABLE)
    assert all(is_under(t.file.file_path, table.location()) for t in table.scan().plan_files())
    stand_in: S3TablesStandIn = box.s3tables
    # Observed, not assumed: the commit's REST calls (signed for s3tables) and the job's data files.
    assert {"s3tables:GetTableBucket", "s3tables:CreateTable", "s3tables:UpdateTableMetadataLocation"} <= (
        _actions(box, "CommitRole")
    )
    assert "s3tables:PutTableData" in _actions(box, "EmrJobRole")
    # pyiceberg's own writes (manifests, through pyarrow) are the commit's table data too.
    assert "s3tables:PutTableData" in _actions(box, "CommitRole")
    assert stand_in.forwarded > 0
    assert all(call.status < 500 for call in stand_in.rest_calls), stand_in.rest_calls
    assert not any(c.action.startswith("glue:") for c in box.recorder.calls)
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))

    # The check can fail: a copy of the template without one action refuses the calls that need it.
    _without(box, "S3TablesCatalogPolicy", "s3tables:UpdateTableMetadataLocation")
    _without(box, "S3TablesDataPolicy", "s3tables:PutTableData")
    refused = {(c.role, c.action) for c in box.recorder.denied()}
    assert refused == {
        ("CommitRole", "s3tables:UpdateTableMetadataLocation"),
        ("EmrJobRole", "s3tables:PutTableData"),
    }


def test_rest_requests_are_authorized_as_s3_tables_documents_them() -> None:
    prefix = "/v1/arn%3Aaws%3As3tables%3Aus-east-1%3A123456789012%3Abucket%2Flake"
    table = f"{ARN}/table/shop.orders"
    assert rest_iam_requests("GET", "/v1/config", ARN) == [("s3tables:GetTableBucket", ARN)]
    assert rest_iam_requests("POST", f"{prefix}/namespaces", ARN) == [("s3tables:CreateNamespace", ARN)]
    assert rest_iam_requests("GET", f"{prefix}/namespaces/shop", ARN) == [("s3tables:GetNamespace", ARN)]
    assert rest_iam_requests("GET", f"{prefix}/namespaces/shop/tables", ARN) == [("s3tables:ListTables", ARN)]
    assert rest_iam_requests("POST", f"{prefix}/namespaces/shop/tables", ARN) == [
        ("s3tables:CreateTable", ARN),
        ("s3tables:PutTableData", f"{ARN}/table/*"),
    ]
    assert rest_iam_requests("GET", f"{prefix}/namespaces/shop/tables/orders", ARN) == [
        ("s3tables:GetTable", table),
        ("s3tables:GetTableMetadataLocation", table),
        ("s3tables:GetTableData", table),
    ]
    assert rest_iam_requests("POST", f"{prefix}/namespaces/shop/tables/orders", ARN) == [
        ("s3tables:UpdateTableMetadataLocation", table),
        ("s3tables:PutTableData", table),
        ("s3tables:GetTableData", table),
    ]
    # What the mapping does not know is refused, never waved through.
    assert rest_iam_requests("POST", f"{prefix}/transactions/commit", ARN)[0][0].startswith("unmapped:")


def test_a_table_buckets_objects_are_table_data_and_a_listing_or_delete_is_refused() -> None:
    found: list[tuple[str, str]] = [
        ("s3:PutObject", "arn:aws:s3:::lake/shop/orders/data/kafscale/r1/a.parquet"),
        ("s3:GetObject", "arn:aws:s3:::lake/shop/orders/metadata/snap.avro"),
        ("s3:ListBucket", "arn:aws:s3:::lake"),
        ("s3:DeleteObject", "arn:aws:s3:::lake/shop/orders/data/x.parquet"),
        ("s3:GetObject", "arn:aws:s3:::runs/plan.json"),
    ]
    assert table_data_requests(found, {"lake": ARN}) == [
        ("s3tables:PutTableData", f"{ARN}/table/shop.orders"),
        ("s3tables:GetTableData", f"{ARN}/table/shop.orders"),
        ("unsupported-in-table-bucket:s3:ListBucket", ARN),
        ("unsupported-in-table-bucket:s3:DeleteObject", f"{ARN}/table/shop.orders"),
        ("s3:GetObject", "arn:aws:s3:::runs/plan.json"),
    ]


def test_a_config_file_without_an_iceberg_section_reaches_s3_tables_from_the_stacks_environment() -> None:
    """What deploy.md tells an S3 Tables user: the stack's environment names the catalog and the
    table bucket; the endpoint and its SigV4 signing follow from the ARN."""
    from kafscale_iceberg.config.deployment import apply_deployment_environment
    from tests.support.cfn_template import Deployment, functions

    parameters = {
        "ConfigLocation": "s3://config/config.yaml",
        "SegmentBucketName": "kafscale-data",
        "SubnetIds": "subnet-0a",
        "SecurityGroupIds": "sg-0c",
        "WarehouseBucket": "unused-by-the-tables",
        "EtcdEndpoints": "http://etcd:2379",
        "CatalogType": "s3tables",
        "TableBucketArn": ARN,
    }
    deployment = Deployment(parameters)
    commit = next(f for f in functions() if f.logical_id == "CommitFunction")
    data = {"mappings": [{"topic": TOPIC, "table": TABLE, "create_table_if_missing": True}]}

    config = apply_deployment_environment(
        data, deployment.environment(commit), source="s3://config/config.yaml"
    )

    catalog = config.iceberg.catalog
    assert (catalog.type, catalog.uri) == ("rest", "https://s3tables.us-east-1.amazonaws.com/iceberg")
    assert (catalog.sigv4, catalog.signing_name, catalog.signing_region) == (True, "s3tables", "us-east-1")
    assert config.iceberg.warehouse == ARN
    assert config.iceberg.in_table_bucket
    assert not config.runs.location.startswith(ARN)
