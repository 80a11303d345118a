"""Avro topics through a schema registry on the AWS path: launcher Lambda -> the real state machine ->
the EMR job (local Spark) reading each record's schema from the registry -> the commit Lambda creating
and evolving the Glue table, every AWS call checked against its role in template.yaml.

One box, registries in turn (the user edits the config file between them; every invocation reads it
again): (a) a Confluent registry whose credentials the job's driver reads from Secrets Manager
(`SchemaRegistrySecretArn`, `schema_registry.credentials_secret`), served by the stand-in of
`tests/support/schema_registry.py` (no registry server installs here) which requires them; (b) the
AWS Glue Schema Registry on moto (`GlueSchemaRegistryName`, `schema_registry.type: glue`), read by the
EMR job's tasks with its role's credentials; (c) the same, read by the Lambda runner's tasks (a small
run). The box and each of its fakes are described in tests/support/aws_box.py, with what each does
not cover.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest

from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from tests.support.aws_box import EMR_JOB_ROLE, Box, SparkBoxOpener
from tests.support.cfn_template import REGION
from tests.support.glue_registry import GlueRegistry, compressed, open_glue_registry
from tests.support.moto import MotoEndpoint
from tests.support.schema_registry import StandInRegistry
from tests.support.segments import put_segment
from tests.test_record_decoders import PIZZA_V1, PIZZA_V2, Producer, pizza

pytestmark = [pytest.mark.slow, pytest.mark.aws]

CONFLUENT_TOPIC = "pizzas"
GLUE_TOPIC = "glue_pizzas"
CREDENTIALS = ("reader", "s3cret")


@pytest.fixture
def secret_arn(moto_server: MotoEndpoint) -> str:
    """The registry's credentials as the operator stores them (deploy.md, "Configure")."""
    client = boto3.client("secretsmanager", endpoint_url=moto_server.url, region_name=REGION)
    username, password = CREDENTIALS
    secret = client.create_secret(
        Name=f"kafscale-iceberg/registry-{moto_server.url.rsplit(':', 1)[1]}-{id(client)}",
        SecretString=json.dumps({"username": username, "password": password}),
    )
    return str(secret["ARN"])


@pytest.fixture
def glue_registry(moto_server: MotoEndpoint) -> Iterator[GlueRegistry]:
    """The Glue schema registry in the stack's region (the template's policy names its own region)."""
    with open_glue_registry(moto_server.url, region=REGION) as registry:
        yield registry


@pytest.fixture
def box(
    spark_box: SparkBoxOpener,
    moto_server: MotoEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    schema_registry: StandInRegistry,
    glue_registry: GlueRegistry,
    secret_arn: str,
) -> Iterator[Box]:
    schema_registry.basic = CREDENTIALS
    # The job's driver runs in this process (the local runner's job thread): on EMR it reaches Secrets
    # Manager's regional endpoint, here moto's (what AWS_ENDPOINT_URL gives the functions).
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", moto_server.url)
    mappings = [
        {"topic": topic, "table": f"shop.{topic}", "create_table_if_missing": True, "value_format": "avro"}
        for topic in (CONFLUENT_TOPIC, GLUE_TOPIC)
    ]
    with spark_box(
        mappings=mappings,
        parameters={"SchemaRegistrySecretArn": secret_arn, "GlueSchemaRegistryName": glue_registry.name},
        schema_registry={"url": schema_registry.url, "credentials_secret": secret_arn},
    ) as opened:
        yield opened


def _columns(box: Box, topic: str) -> dict[str, str]:
    schema = box.catalog().load_table(f"shop.{topic}").schema()
    return {c.name: c.type_name for c in table_columns(schema)}


def test_avro_topics_land_through_a_confluent_registry_then_the_glue_schema_registry(
    box: Box, schema_registry: StandInRegistry, glue_registry: GlueRegistry, secret_arn: str
) -> None:
    # (a) Confluent: the driver reads the secret; the tasks send its credentials (the stand-in
    # refuses requests without them: 401, a failed run).
    values = Producer(schema_registry).values(PIZZA_V1, [pizza(1), pizza(2)])
    put_segment(box.s3, box.segment_bucket, box.namespace, CONFLUENT_TOPIC, 0, 0, 2, values=values)
    box.pump(timeout_s=300)  # local Spark on a shared machine: settles when done
    assert [r["id"] for r in sorted(box.rows(f"shop.{CONFLUENT_TOPIC}"), key=lambda r: r["offset"])] == [
        1,
        2,
    ], box.describe()
    assert _columns(box, CONFLUENT_TOPIC)["price"] == "decimal(6,2)"
    assert box.recorder.count("secretsmanager:GetSecretValue", EMR_JOB_ROLE) >= 1
    assert "/schemas/ids/1" in schema_registry.requests

    # (b) Glue: the same job reads each record's schema version from Glue; a compressed record and a
    # second version in the same run evolve the table in the commit that lands them.
    box.rewrite_config(schema_registry=glue_registry.config())
    old = glue_registry.avro(GLUE_TOPIC, PIZZA_V1, [pizza(3)])
    new = glue_registry.avro(GLUE_TOPIC, PIZZA_V2, [pizza(2**40, tip=1.5)])
    values = [old[0], compressed(new[0])]
    put_segment(box.s3, box.segment_bucket, box.namespace, GLUE_TOPIC, 0, 0, 2, values=values)
    box.pump(timeout_s=300)  # local Spark on a shared machine: settles when done
    rows = sorted(box.rows(f"shop.{GLUE_TOPIC}"), key=lambda r: r["offset"])
    assert [(r["id"], r["tip"]) for r in rows] == [(3, None), (2**40, 1.5)], box.describe()
    assert _columns(box, GLUE_TOPIC)["id"] == "long"
    reads = [c for c in box.recorder.calls if c.action == "glue:GetSchemaVersion" and c.role == EMR_JOB_ROLE]
    assert len(reads) >= 2  # the two versions, each by the id in the header: authorized on "*", as on AWS
    assert {c.resource for c in reads} == {"*"}

    # (c) Glue from the Lambda runner: a small run's tasks in the runner function, under its own role.
    box.rewrite_config(runner={"lambda": {"max_bytes": 64 * 1024 * 1024}})
    (later,) = glue_registry.avro(GLUE_TOPIC, PIZZA_V2, [pizza(4, tip=0.5)])
    put_segment(box.s3, box.segment_bucket, box.namespace, GLUE_TOPIC, 0, 2, 1, values=[later])
    box.pump(timeout_s=300)  # local Spark on a shared machine: settles when done
    rows = sorted(box.rows(f"shop.{GLUE_TOPIC}"), key=lambda r: r["offset"])
    assert [(r["id"], r["tip"]) for r in rows][-1] == (4, 0.5), box.describe()
    assert box.recorder.count("glue:GetSchemaVersion", "PlanRunnerRole") >= 1

    # (d) a field renamed with an Avro alias (issue 34): the commit Lambda renames the Glue table's
    # column in the commit of the rows that bring it; the column keeps its field id and old rows.
    table = f"shop.{GLUE_TOPIC}"
    sauce_id = box.catalog().load_table(table).schema().find_field("sauce").field_id
    renamed = {**PIZZA_V2, "fields": [_aliased(f) for f in PIZZA_V2["fields"]]}
    record = {k: v for k, v in pizza(5, tip=0.25).items() if k != "sauce"} | {"topping_sauce": "white"}
    (value,) = glue_registry.avro(GLUE_TOPIC, renamed, [record])
    put_segment(box.s3, box.segment_bucket, box.namespace, GLUE_TOPIC, 0, 3, 1, values=[value])
    box.pump(timeout_s=300)
    schema = box.catalog().load_table(table).schema()
    assert schema.find_field("topping_sauce").field_id == sauce_id, box.describe()
    rows = sorted(box.rows(table), key=lambda r: r["offset"])
    assert [r["topping_sauce"] for r in rows] == ["tomato", "tomato", "tomato", "white"]

    assert [e["status"] for e in box.executions()] == ["SUCCEEDED"] * 4
    assert box.recorder.denied() == []


def _aliased(field: dict[str, object]) -> dict[str, object]:
    """`sauce` renamed `topping_sauce`, its old name an alias (Avro's rename)."""
    if field["name"] != "sauce":
        return field
    return {**field, "name": "topping_sauce", "aliases": ["sauce"]}
