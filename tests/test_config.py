"""The config file: the Go processor's keys, defaults and rules, this product's keys, the error messages."""

from __future__ import annotations

import copy
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from kafscale_iceberg.config import (
    KafscaleConfig,
    config_from_mapping,
    describe_partition_field,
    load_config,
    parse_config,
)
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, PartitionField, PartitionTransform
from kafscale_iceberg.exceptions import ConfigError, ConfigValidationError

REPO = Path(__file__).resolve().parents[1]

# The user guide's config examples (seeds/kafscale-iceberg-processor-user-guide.md), verbatim.
GUIDE_COMMON_FIELDS = """\
s3:
  bucket: kafscale-data
  namespace: production
  endpoint: ""
  region: us-east-1
  path_style: false

iceberg:
  catalog:
    type: rest
    uri: https://iceberg-catalog.example.com
    token: ""
    username: ""
    password: ""
  warehouse: s3://iceberg-warehouse/production

offsets:
  backend: etcd
  lease_ttl_seconds: 30
  key_prefix: processors

discovery:
  mode: auto

etcd:
  endpoints:
    - http://etcd.kafscale.svc.cluster.local:2379
  username: ""
  password: ""
"""
GUIDE_MINIO = """\
s3:
  bucket: kafscale-snapshots
  namespace: kafscale-demo
  endpoint: http://minio.kafscale-demo.svc.cluster.local:9000
  region: us-east-1
  path_style: true
"""
GUIDE_TOPIC_TO_TABLE = """\
mappings:
  - topic: orders
    table: prod.orders
    mode: append
    create_table_if_missing: true
"""
GUIDE_MAPPING_COLUMNS = """\
mappings:
  - topic: orders
    table: prod.orders
    mode: append
    create_table_if_missing: true
    schema:
      columns:
        - name: order_id
          type: long
          required: true
        - name: status
          type: string
      allow_type_widening: true
"""
GUIDE_REGISTRY_COLUMNS = """\
schema:
  mode: "off"
  registry:
    base_url: https://schemas.example.com
    timeout_seconds: 5
    cache_seconds: 300

mappings:
  - topic: orders
    table: prod.orders
    schema:
      source: registry
"""

# Shaped like the Go processor's shipped config.yaml / Helm values: note the unquoted `mode: off`
# under lfs, which YAML 1.1 (PyYAML's safe_load) reads as False.
SHIPPED_STYLE = """\
s3:
  bucket: kafscale-data
  namespace: production
  region: us-east-1
  path_style: false
iceberg:
  catalog:
    type: rest
    uri: https://iceberg-catalog.example.com
    token: ""
    username: ""
    password: null
  warehouse: s3://iceberg-warehouse/production
offsets:
  backend: etcd
  lease_ttl_seconds: 30
  key_prefix: processors
processor:
  poll_interval_seconds: 5
discovery:
  mode: auto
etcd:
  endpoints:
    - http://etcd.kafscale.svc.cluster.local:2379
  password: null
schema:
  mode: "off"
  registry:
    base_url: https://schemas.example.com
mappings:
  - topic: orders
    table: prod.orders
    mode: append
    create_table_if_missing: true
    schema:
      columns:
        - name: order_id
          type: long
          required: true
      allow_type_widening: true
    lfs:
      mode: off
      max_inline_size: 1048576
      store_metadata: false
      validate_checksum: true
      resolve_concurrency: 4
"""

SECRET = "hunter2-very-secret"


def minimal() -> dict[str, Any]:
    """The smallest valid config a Go user would write: bucket, REST catalog, etcd, one mapping."""
    return {
        "s3": {"bucket": "kafscale-data"},
        "iceberg": {"catalog": {"type": "rest", "uri": "https://catalog.example.com"}},
        "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
        "runs": {"location": "s3://runs-bucket/runs"},
        "mappings": [{"topic": "orders", "table": "shop.orders"}],
    }


def local() -> dict[str, Any]:
    """A valid one-machine config: SQL catalog, local warehouse, embedded offset store."""
    return {
        "s3": {"bucket": "kafscale-data", "endpoint": "http://127.0.0.1:5000", "path_style": True},
        "iceberg": {
            "catalog": {"type": "sql", "uri": "sqlite:///tmp/catalog.db"},
            "warehouse": "file:///tmp/warehouse",
        },
        "offsets": {"backend": "sqlite"},
        "mappings": [
            {
                "topic": "orders",
                "table": "shop.orders",
                "schema": {
                    "columns": [
                        {"name": "order_id", "type": "long"},
                        {"name": "ordered_at", "type": "timestamp"},
                        {"name": "order_date", "type": "date"},
                    ]
                },
            }
        ],
    }


def load(data: dict[str, Any], environ: dict[str, str] | None = None) -> KafscaleConfig:
    return config_from_mapping(data, source="test.yaml", environ=environ or {})


def problems_of(data: dict[str, Any], environ: dict[str, str] | None = None) -> dict[str, str]:
    """Key path -> problem, for every problem the loader reports."""
    with pytest.raises(ConfigValidationError) as info:
        load(data, environ)
    return dict(info.value.problems)


def emr_runner() -> dict[str, Any]:
    return {
        "type": "emr_serverless",
        "emr_serverless": {
            "application_id": "00fabcdefg123456",
            "execution_role_arn": "arn:aws:iam::123456789012:role/kafscale-emr",
            "entry_point": "s3://artifacts/spark_app/main.py",
            "venv_archive": "s3://artifacts/venv.tar.gz",
        },
    }


# ------------------------------------------------------------------------------------------------
# Files written for the Go processor load


def test_user_guide_common_fields_with_a_topic_mapping_load() -> None:
    config = parse_config(GUIDE_COMMON_FIELDS + "\n" + GUIDE_TOPIC_TO_TABLE, source="guide", environ={})
    assert config.s3.bucket == "kafscale-data"
    assert config.iceberg.catalog.type == "rest"
    assert config.etcd.endpoints == ("http://etcd.kafscale.svc.cluster.local:2379",)
    assert config.mappings[0].create_table_if_missing is True


def test_user_guide_minio_s3_section_loads() -> None:
    other_sections = GUIDE_COMMON_FIELDS.split("\n\n")[1:]
    text = "\n".join([GUIDE_MINIO, *other_sections, GUIDE_TOPIC_TO_TABLE])
    config = parse_config(text, source="guide", environ={})
    assert config.s3.endpoint == "http://minio.kafscale-demo.svc.cluster.local:9000"
    assert config.s3.path_style is True
    assert config.s3.namespace == "kafscale-demo"


def test_user_guide_mapping_defined_columns_load() -> None:
    config = parse_config(GUIDE_COMMON_FIELDS + "\n" + GUIDE_MAPPING_COLUMNS, source="guide", environ={})
    schema = config.mappings[0].schema_
    assert schema.source == "mapping"
    assert [(c.name, c.type, c.required) for c in schema.columns] == [
        ("order_id", "long", True),
        ("status", "string", False),
    ]
    assert schema.allow_type_widening is True


def test_user_guide_registry_driven_columns_load() -> None:
    config = parse_config(GUIDE_COMMON_FIELDS + "\n" + GUIDE_REGISTRY_COLUMNS, source="guide", environ={})
    assert config.mappings[0].schema_.source == "registry"
    assert config.schema_.mode == "off"
    assert config.schema_.registry.base_url == "https://schemas.example.com"


def test_shipped_style_file_with_unquoted_lfs_mode_off_loads(tmp_path: Path) -> None:
    assert yaml.safe_load(SHIPPED_STYLE)["mappings"][0]["lfs"]["mode"] is False  # the YAML 1.1 trap
    path = tmp_path / "config.yaml"
    path.write_text(SHIPPED_STYLE)
    config = load_config(path, environ={})
    assert config.mappings[0].lfs.mode == "off"
    assert config.mappings[0].lfs.max_inline_size == 1048576
    assert config.source == str(path)


def test_unquoted_schema_mode_off_is_off() -> None:
    config = parse_config(SHIPPED_STYLE.replace('mode: "off"', "mode: off"), source="t", environ={})
    assert config.schema_.mode == "off"


def test_false_from_a_yaml_1_1_dict_means_off() -> None:
    data = yaml.safe_load(SHIPPED_STYLE.replace('mode: "off"', "mode: off"))
    config = load(data)
    assert config.mappings[0].lfs.mode == "off"
    assert config.schema_.mode == "off"


def test_yaml_1_1_words_stay_strings_where_the_key_is_a_string() -> None:
    text = SHIPPED_STYLE.replace("namespace: production", "namespace: no").replace(
        "topic: orders", "topic: on"
    )
    config = parse_config(text, source="t", environ={})
    assert config.s3.namespace == "no"
    assert config.mappings[0].topic == "on"


def test_yaml_booleans_accept_go_spellings() -> None:
    config = parse_config(
        SHIPPED_STYLE.replace("path_style: false", "path_style: yes"), source="t", environ={}
    )
    assert config.s3.path_style is True


# ------------------------------------------------------------------------------------------------
# Defaults


def test_go_processor_defaults() -> None:
    config = load(minimal())
    assert (config.s3.namespace, config.s3.endpoint, config.s3.region, config.s3.path_style) == (
        "",
        "",
        "",
        False,
    )
    assert config.iceberg.warehouse == ""
    assert config.discovery.mode == "auto"
    assert config.offsets.backend == "etcd"
    assert config.offsets.lease_ttl_seconds == 30
    assert config.offsets.key_prefix == "processors"
    assert config.processor.poll_interval_seconds == 5
    assert config.schema_.mode == "off"
    assert config.schema_.registry.base_url == ""
    assert config.schema_.registry.timeout_seconds == 5
    assert config.schema_.registry.cache_seconds == 300
    mapping = config.mappings[0]
    assert mapping.mode == "append"
    assert mapping.create_table_if_missing is False
    assert mapping.schema_.source == "none"
    assert mapping.schema_.columns == ()
    assert mapping.schema_.allow_type_widening is False
    lfs = mapping.lfs
    assert (lfs.mode, lfs.max_inline_size, lfs.store_metadata) == ("off", 0, False)
    assert (lfs.validate_checksum, lfs.resolve_concurrency) == (True, 4)


def test_the_default_minimum_batch_never_exceeds_a_smaller_run_limit() -> None:
    data = minimal()
    data["runs"] = {**data.get("runs", {}), "max_bytes_per_run": "64MiB"}
    assert load(data).runs.min_bytes_per_run == 64 * 1024**2


def test_product_defaults() -> None:
    config = load(minimal())
    runs = config.runs
    assert runs.max_bytes_per_run == 8 * 1024**3
    assert runs.max_segments_per_run == 5000
    assert runs.min_bytes_per_run == 96 * 1024**2
    assert runs.max_wait_seconds == 480
    assert runs.target_file_size_bytes == 128 * 1024**2
    assert runs.corrupt_segment_policy == "fail"
    assert runs.verify_crc is True
    assert runs.timeout_minutes == 60
    assert runs.max_consecutive_failures == 3
    assert (runs.retry_backoff_seconds, runs.retry_backoff_max_seconds) == (30, 900)
    assert config.runner.type == "local"
    assert config.runner.local.master == "local[*]"
    assert config.runner.local.spark_conf == {}
    assert config.runner.local.keep_session_warm is True
    assert config.runner.emr_serverless.release_label == "emr-spark-8.0.0"
    assert config.runner.emr_serverless.poll_interval_seconds == 15
    assert (config.notifications.queue_url, config.notifications.work_queue_url) == ("", "")
    assert config.offsets.sqlite_path == ".kafscale-iceberg/offsets.sqlite"
    assert config.iceberg.catalog.name == "kafscale"
    mapping = config.mappings[0]
    assert mapping.dead_letter_table == "shop.orders__dlq"
    assert mapping.partition_by == ()
    assert config.corrupt_segment_policy_for(mapping) == "fail"
    assert config.target_file_size_for(mapping) == 128 * 1024**2


@pytest.mark.parametrize(
    ("section", "key", "default"),
    [
        ("offsets", "lease_ttl_seconds", 30),
        ("processor", "poll_interval_seconds", 5),
        ("registry", "timeout_seconds", 5),
        ("registry", "cache_seconds", 300),
        ("lfs", "resolve_concurrency", 4),
    ],
)
@pytest.mark.parametrize("zero", [0, None, "0"], ids=["zero", "null", "zero-as-text"])
def test_zero_or_null_selects_the_go_default(section: str, key: str, default: int, zero: object) -> None:
    data = minimal()
    target = {
        "offsets": data.setdefault("offsets", {}),
        "processor": data.setdefault("processor", {}),
        "registry": data.setdefault("schema", {}).setdefault("registry", {}),
        "lfs": data["mappings"][0].setdefault("lfs", {}),
    }[section]
    target[key] = zero
    config = load(data)
    values = {
        "offsets": config.offsets,
        "processor": config.processor,
        "registry": config.schema_.registry,
        "lfs": config.mappings[0].lfs,
    }
    assert getattr(values[section], key) == default


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (("offsets",), "offsets.lease_ttl_seconds"),
        (("processor",), "processor.poll_interval_seconds"),
        (("schema", "registry"), "schema.registry.timeout_seconds"),
        (("schema", "registry"), "schema.registry.cache_seconds"),
    ],
)
def test_negative_go_integer_setting_is_rejected(path: tuple[str, ...], key: str) -> None:
    data = minimal()
    node = data
    for part in path:
        node = node.setdefault(part, {})
    node[key.rsplit(".", 1)[1]] = -1
    assert "must be > 0" in problems_of(data)[key]


def test_empty_string_selects_the_default() -> None:
    data = minimal()
    data["discovery"] = {"mode": ""}
    data["offsets"] = {"key_prefix": "", "backend": ""}
    config = load(data)
    assert (config.discovery.mode, config.offsets.key_prefix, config.offsets.backend) == (
        "auto",
        "processors",
        "etcd",
    )


# ------------------------------------------------------------------------------------------------
# The Go processor's validation rules, each naming its key


@pytest.mark.parametrize(
    ("remove", "key"),
    [
        (("s3", "bucket"), "s3.bucket"),
        (("iceberg", "catalog", "type"), "iceberg.catalog.type"),
        (("mappings", 0, "topic"), "mappings[0].topic"),
        (("mappings", 0, "table"), "mappings[0].table"),
    ],
)
def test_required_key_is_named(remove: tuple[str | int, ...], key: str) -> None:
    data = minimal()
    node: Any = data
    for part in remove[:-1]:
        node = node[part]
    del node[remove[-1]]
    assert problems_of(data)[key].startswith("is required")


def test_missing_catalog_type_lists_the_allowed_values() -> None:
    data = minimal()
    del data["iceberg"]
    assert problems_of(data)["iceberg.catalog.type"] == "is required; allowed values: rest, glue, sql"


def test_bucket_with_scheme_or_path_is_rejected() -> None:
    data = minimal()
    data["s3"]["bucket"] = "s3://kafscale-data/prefix"
    assert "bucket name without s3://" in problems_of(data)["s3.bucket"]


def test_namespace_slashes_are_trimmed() -> None:
    data = minimal()
    data["s3"]["namespace"] = "/production/"
    config = load(data)
    assert config.s3.namespace == "production"
    assert config.s3.prefix == "production/"


def test_empty_namespace_is_the_bucket_root() -> None:
    assert load(minimal()).s3.prefix == ""


def test_endpoint_needs_a_scheme() -> None:
    data = minimal()
    data["s3"]["endpoint"] = "minio:9000"
    assert "'minio:9000'" in problems_of(data)["s3.endpoint"]


@pytest.mark.parametrize("alias", ["http", "https", "REST"])
def test_go_catalog_type_aliases_mean_rest(alias: str) -> None:
    data = minimal()
    data["iceberg"]["catalog"]["type"] = alias
    assert load(data).iceberg.catalog.type == "rest"


def test_unknown_catalog_type_is_rejected_with_the_allowed_values() -> None:
    data = minimal()
    data["iceberg"]["catalog"]["type"] = "hive"
    assert (
        problems_of(data)["iceberg.catalog.type"]
        == "'hive' is not allowed; allowed values: 'rest', 'glue' or 'sql'"
    )


@pytest.mark.parametrize("catalog_type", ["rest", "sql"])
def test_catalog_uri_is_required_for_rest_and_sql(catalog_type: str) -> None:
    data = local()
    data["iceberg"]["catalog"] = {"type": catalog_type}
    assert problems_of(data)["iceberg.catalog.uri"].startswith(f"is required when type is '{catalog_type}'")


def test_glue_catalog_needs_no_uri() -> None:
    data = minimal()
    data["iceberg"]["catalog"] = {"type": "glue"}
    assert load(data).iceberg.catalog.uri == ""


def test_rest_username_without_password_is_rejected() -> None:
    data = minimal()
    data["iceberg"]["catalog"]["username"] = "client"
    assert "username:password" in problems_of(data)["iceberg.catalog.password"]


def test_warehouse_trailing_slash_is_trimmed() -> None:
    data = minimal()
    data["iceberg"]["warehouse"] = "s3://lake/warehouse/"
    assert load(data).iceberg.warehouse == "s3://lake/warehouse"


def test_sql_catalog_requires_a_warehouse() -> None:
    data = local()
    del data["iceberg"]["warehouse"]
    data["runs"] = {"location": "/tmp/runs"}
    assert "is required when iceberg.catalog.type is 'sql'" in problems_of(data)["iceberg.warehouse"]


def test_discovery_mode_is_case_insensitive() -> None:
    data = minimal()
    data["discovery"] = {"mode": "S3"}
    assert load(data).discovery.mode == "s3"


def test_unknown_discovery_mode_is_rejected() -> None:
    data = minimal()
    data["discovery"] = {"mode": "kafka"}
    assert "allowed values: 'auto', 'etcd' or 's3'" in problems_of(data)["discovery.mode"]


def test_etcd_endpoints_are_required_for_the_etcd_backend() -> None:
    data = minimal()
    del data["etcd"]
    assert "offsets.backend is 'etcd'" in problems_of(data)["etcd.endpoints"]


def test_etcd_endpoints_are_required_for_etcd_discovery() -> None:
    data = local()
    data["discovery"] = {"mode": "etcd"}
    assert problems_of(data)["etcd.endpoints"] == "is required when discovery.mode is 'etcd'"


def test_etcd_endpoints_are_not_required_with_the_sqlite_backend() -> None:
    config = load(local())
    assert config.offsets.backend == "sqlite"
    assert config.etcd.endpoints == ()


def test_etcd_endpoints_accept_a_comma_separated_string() -> None:
    data = minimal()
    data["etcd"]["endpoints"] = "etcd-0:2379, etcd-1:2379"
    assert load(data).etcd.endpoints == ("etcd-0:2379", "etcd-1:2379")


def test_noop_offsets_backend_is_rejected_saying_why() -> None:
    data = minimal()
    data["offsets"] = {"backend": "noop"}
    problem = problems_of(data)["offsets.backend"]
    assert "'noop' is not supported; allowed values: 'etcd', 'sqlite'" in problem
    assert "persists no offsets" in problem


def test_sqlite_backend_file_is_configurable() -> None:
    data = local()
    data["offsets"]["sqlite_path"] = "/var/lib/kafscale/offsets.sqlite"
    assert load(data).offsets.sqlite_path == "/var/lib/kafscale/offsets.sqlite"


@pytest.mark.parametrize("mode", ["lenient", "strict"])
def test_schema_validation_requires_a_registry(mode: str) -> None:
    data = minimal()
    data["schema"] = {"mode": mode}
    assert problems_of(data)["schema.registry.base_url"] == f"is required when schema.mode is '{mode}'"


def test_schema_mode_with_a_registry_loads() -> None:
    data = minimal()
    data["schema"] = {"mode": "Strict", "registry": {"base_url": "https://schemas.example.com/"}}
    config = load(data)
    assert config.schema_.mode == "strict"
    assert config.schema_.registry.base_url == "https://schemas.example.com"


def test_unknown_schema_mode_is_rejected() -> None:
    data = minimal()
    data["schema"] = {"mode": "warn"}
    assert "allowed values: 'off', 'lenient' or 'strict'" in problems_of(data)["schema.mode"]


def test_schema_source_is_mapping_when_columns_are_listed() -> None:
    data = minimal()
    data["schema"] = {"registry": {"base_url": "https://schemas.example.com"}}
    data["mappings"][0]["schema"] = {"columns": [{"name": "id", "type": "long"}]}
    assert load(data).mappings[0].schema_.source == "mapping"


def test_schema_source_is_registry_when_a_registry_is_set_and_no_columns() -> None:
    data = minimal()
    data["schema"] = {"registry": {"base_url": "https://schemas.example.com"}}
    assert load(data).mappings[0].schema_.source == "registry"


def test_schema_source_is_none_without_columns_or_registry() -> None:
    assert load(minimal()).mappings[0].schema_.source == "none"


def test_registry_source_without_a_registry_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"source": "registry"}
    assert "schema.registry.base_url" in problems_of(data)["mappings[0].schema.source"]


def test_mapping_source_without_columns_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"source": "mapping"}
    assert "is required when schema.source is 'mapping'" in problems_of(data)["mappings[0].schema.columns"]


def test_unknown_schema_source_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"source": "avro"}
    assert "'mapping', 'registry', 'none' or 'infer'" in problems_of(data)["mappings[0].schema.source"]


def test_column_types_are_case_insensitive() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"columns": [{"name": "at", "type": "TimeStamp"}]}
    assert load(data).mappings[0].schema_.columns[0].type == "timestamp"


def test_unknown_column_type_names_its_key_path_value_and_allowed_types() -> None:
    data = minimal()
    data["mappings"] += [
        {"topic": "a", "table": "x.a"},
        {"topic": "b", "table": "x.b", "schema": {"columns": [{"name": "at", "type": "datetime"}]}},
    ]
    problem = problems_of(data)["mappings[2].schema.columns[0].type"]
    assert problem.startswith("'datetime' is not allowed; allowed values: 'boolean', 'int', 'long'")
    assert (
        "'timestamp', 'date', 'timestamptz', 'uuid', 'time', 'decimal', 'struct', 'list' or 'map'" in problem
    )


def test_column_name_is_required() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"columns": [{"type": "long"}]}
    assert problems_of(data)["mappings[0].schema.columns[0].name"] == "is required"


def test_column_named_like_a_base_field_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"columns": [{"name": "offset", "type": "long"}]}
    assert "base field" in problems_of(data)["mappings[0].schema.columns[0].name"]


def test_column_listed_twice_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {
        "columns": [{"name": "id", "type": "long"}, {"name": "id", "type": "int"}]
    }
    assert problems_of(data)["mappings[0].schema.columns[1].name"] == "'id' is listed twice"


def test_mapping_mode_must_be_append_or_upsert() -> None:
    data = minimal()
    data["mappings"][0]["mode"] = "merge"
    assert (
        problems_of(data)["mappings[0].mode"]
        == "'merge' is not allowed; allowed values: 'append' or 'upsert'"
    )


@pytest.mark.parametrize("topic", ["bad topic", "orders/0", "..", "x" * 250])
def test_topic_must_be_a_kafka_topic_name(topic: str) -> None:
    data = minimal()
    data["mappings"][0]["topic"] = topic
    assert "is not a Kafka topic name" in problems_of(data)["mappings[0].topic"]


def test_table_is_split_into_namespace_and_name() -> None:
    data = minimal()
    data["mappings"][0]["table"] = "lake.prod.orders"
    mapping = load(data).mappings[0]
    assert mapping.identifier == ("lake", "prod", "orders")
    assert mapping.namespace == ("lake", "prod")
    assert mapping.table_name == "orders"


@pytest.mark.parametrize("table", ["orders", "prod.", ".orders", "prod..orders"])
def test_table_must_be_a_namespace_qualified_identifier(table: str) -> None:
    data = minimal()
    data["mappings"][0]["table"] = table
    assert "must be an Iceberg identifier 'namespace.table'" in problems_of(data)["mappings[0].table"]


def test_glue_tables_have_one_namespace_level() -> None:
    data = minimal()
    data["iceberg"]["catalog"] = {"type": "glue"}
    data["mappings"][0]["table"] = "lake.prod.orders"
    assert "Glue has one level" in problems_of(data)["mappings[0].table"]


def test_a_topic_may_feed_several_mappings_but_a_table_is_written_by_one() -> None:
    data = minimal()
    data["mappings"].append({"topic": "orders", "table": "shop.orders_copy"})
    config = load(data)
    assert [m.table for m in config.mappings_for("orders")] == [config.mappings[0].table, "shop.orders_copy"]
    data["mappings"].append({"topic": "orders", "table": "shop.orders_copy"})
    assert "already written by mappings[1].table" in problems_of(data)["mappings[2].table"]


def test_at_least_one_mapping_is_required() -> None:
    data = minimal()
    data["mappings"] = []
    assert "at least one" in problems_of(data)["mappings"]


@pytest.mark.parametrize("mode", ["Resolve", "reference", "skip"])
def test_lfs_modes_load_case_insensitively(mode: str) -> None:
    data = minimal()
    data["s3"]["region"] = "us-east-1"
    data["mappings"][0]["lfs"] = {"mode": mode}
    assert load(data).mappings[0].lfs.mode == mode.lower()


def test_unknown_lfs_mode_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["lfs"] = {"mode": "inline"}
    assert "'off', 'resolve', 'reference', 'skip' or 'hybrid'" in problems_of(data)["mappings[0].lfs.mode"]


def test_hybrid_lfs_needs_a_positive_max_inline_size() -> None:
    data = minimal()
    data["s3"]["region"] = "us-east-1"
    data["mappings"][0]["lfs"] = {"mode": "hybrid"}
    assert "must be > 0 when mode is 'hybrid'" in problems_of(data)["mappings[0].lfs.max_inline_size"]


def test_negative_lfs_resolve_concurrency_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["lfs"] = {"resolve_concurrency": -2}
    assert "got -2" in problems_of(data)["mappings[0].lfs.resolve_concurrency"]


def test_lfs_validate_checksum_can_be_turned_off() -> None:
    data = minimal()
    data["mappings"][0]["lfs"] = {"validate_checksum": False}
    assert load(data).mappings[0].lfs.validate_checksum is False


def test_s3_region_is_required_when_lfs_is_enabled() -> None:
    data = minimal()
    data["mappings"][0]["lfs"] = {"mode": "resolve"}
    assert "lfs is enabled (mappings for orders)" in problems_of(data)["s3.region"]


# ------------------------------------------------------------------------------------------------
# Environment overrides


def test_lfs_environment_overrides_apply_to_every_mapping() -> None:
    data = minimal()
    data["s3"]["region"] = "us-east-1"
    data["mappings"].append({"topic": "clicks", "table": "web.clicks", "lfs": {"mode": "off"}})
    environ = {
        "KAFSCALE_ICEBERG_LFS_MODE": "hybrid",
        "KAFSCALE_ICEBERG_LFS_MAX_INLINE_SIZE": "2048",
        "KAFSCALE_ICEBERG_LFS_STORE_METADATA": "true",
        "KAFSCALE_ICEBERG_LFS_VALIDATE_CHECKSUM": "0",
        "KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY": "8",
    }
    config = load(data, environ)
    for mapping in config.mappings:
        assert (mapping.lfs.mode, mapping.lfs.max_inline_size) == ("hybrid", 2048)
        assert (mapping.lfs.store_metadata, mapping.lfs.validate_checksum) == (True, False)
        assert mapping.lfs.resolve_concurrency == 8


def test_empty_environment_override_is_ignored() -> None:
    config = load(minimal(), {"KAFSCALE_ICEBERG_LFS_MODE": "  "})
    assert config.mappings[0].lfs.mode == "off"


def test_unparsable_environment_override_is_an_error_naming_the_variable() -> None:
    problems = problems_of(minimal(), {"KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY": "many"})
    assert problems["$KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY"] == "must be a whole number, got 'many'"


def test_environment_override_is_validated_like_the_file() -> None:
    data = minimal()
    data["s3"]["region"] = "us-east-1"
    problems = problems_of(data, {"KAFSCALE_ICEBERG_LFS_MODE": "hybrid"})
    assert "mode is 'hybrid'" in problems["mappings[0].lfs.max_inline_size"]


def test_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFSCALE_ICEBERG_LFS_STORE_METADATA", "true")
    config = config_from_mapping(minimal(), source="test.yaml")
    assert config.mappings[0].lfs.store_metadata is True


def test_caller_data_is_not_modified() -> None:
    data = minimal()
    before = copy.deepcopy(data)
    load(data, {"KAFSCALE_ICEBERG_LFS_STORE_METADATA": "true"})
    assert data == before


# ------------------------------------------------------------------------------------------------
# runs


@pytest.mark.parametrize(
    ("warehouse", "expected"),
    [
        ("s3://lake/warehouse/", "s3://lake/warehouse/_kafscale_runs"),
        ("file:///tmp/warehouse", "file:///tmp/warehouse/_kafscale_runs"),
        ("/srv/warehouse", "/srv/warehouse/_kafscale_runs"),
    ],
)
def test_runs_location_defaults_under_the_warehouse(warehouse: str, expected: str) -> None:
    data = minimal()
    del data["runs"]
    data["iceberg"]["warehouse"] = warehouse
    assert load(data).runs.location == expected


def test_runs_location_is_required_without_a_warehouse() -> None:
    data = minimal()
    del data["runs"]
    problem = problems_of(data)["runs.location"]
    assert problem.startswith("is required")
    assert "iceberg.warehouse is empty" in problem


def test_runs_location_is_required_when_the_warehouse_is_a_catalog_name() -> None:
    data = minimal()
    del data["runs"]
    data["iceberg"]["warehouse"] = "polaris_catalog"
    assert "'polaris_catalog' is not an s3:// or file:// location" in problems_of(data)["runs.location"]


def test_explicit_runs_location_wins_over_the_default() -> None:
    data = local()
    data["runs"] = {"location": "s3://runs/prefix/"}
    assert load(data).runs.location == "s3://runs/prefix"


def test_runs_location_with_another_scheme_is_rejected() -> None:
    data = minimal()
    data["runs"]["location"] = "gs://bucket/runs"
    assert "s3:// URI, a file:// URI or a local path" in problems_of(data)["runs.location"]


def test_run_sizes_accept_units() -> None:
    data = minimal()
    data["runs"].update(max_bytes_per_run="2GiB", min_bytes_per_run="64MiB", target_file_size_bytes="256MB")
    runs = load(data).runs
    assert (runs.max_bytes_per_run, runs.min_bytes_per_run) == (2 * 1024**3, 64 * 1024**2)
    assert runs.target_file_size_bytes == 256_000_000


def test_minimum_run_size_above_the_maximum_is_rejected() -> None:
    data = minimal()
    data["runs"].update(max_bytes_per_run="1MiB", min_bytes_per_run="2MiB")
    assert "must not exceed max_bytes_per_run" in problems_of(data)["runs.min_bytes_per_run"]


@pytest.mark.parametrize("key", ["max_segments_per_run", "timeout_minutes", "max_consecutive_failures"])
def test_run_counts_must_be_positive(key: str) -> None:
    data = minimal()
    data["runs"][key] = 0
    assert problems_of(data)[f"runs.{key}"] == "must be > 0, got 0"


def test_corrupt_segment_policy_is_fail_or_quarantine() -> None:
    data = minimal()
    data["runs"]["corrupt_segment_policy"] = "skip"
    assert "'fail' or 'quarantine'" in problems_of(data)["runs.corrupt_segment_policy"]


def test_retry_backoff_doubles_per_failure_up_to_the_cap() -> None:
    data = minimal()
    data["runs"].update(retry_backoff_seconds=30, retry_backoff_max_seconds=100)
    runs = load(data).runs
    assert [runs.retry_delay_seconds(n) for n in (0, 1, 2, 3, 4, 1000)] == [0, 30, 60, 100, 100, 100]


# ------------------------------------------------------------------------------------------------
# runner


def test_emr_serverless_keys_are_not_required_for_the_local_runner() -> None:
    assert load(local()).runner.type == "local"


def test_emr_serverless_required_keys_are_named_when_it_is_selected() -> None:
    data = minimal()
    data["runner"] = {"type": "emr_serverless"}
    problems = problems_of(data)
    for key in ("application_id", "execution_role_arn", "entry_point"):
        assert problems[f"runner.emr_serverless.{key}"].startswith("is required")
    assert "neither is set" in problems["runner.emr_serverless.venv_archive"]


def test_emr_serverless_builds_the_python_environment_parameters() -> None:
    data = minimal()
    data["runner"] = emr_runner()
    data["runner"]["emr_serverless"]["spark_submit_parameters"] = "--conf spark.executor.cores=4"
    emr = load(data).runner.emr_serverless
    assert emr.job_spark_submit_parameters() == (
        "--conf spark.archives=s3://artifacts/venv.tar.gz#environment "
        "--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python "
        "--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python "
        "--conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python "
        "--conf spark.executor.cores=4"
    )


def test_emr_serverless_with_a_custom_image_ships_no_archive() -> None:
    data = minimal()
    data["runner"] = emr_runner()
    del data["runner"]["emr_serverless"]["venv_archive"]
    data["runner"]["emr_serverless"]["image"] = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/kafscale:1"
    parameters = load(data).runner.emr_serverless.job_spark_submit_parameters()
    assert "spark.archives" not in parameters
    # Spark starts the interpreter the image's package was installed for (infra/emr/Dockerfile).
    assert "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=/usr/local/bin/kafscale-python" in parameters


def test_emr_serverless_rejects_both_archive_and_image() -> None:
    data = minimal()
    data["runner"] = emr_runner()
    data["runner"]["emr_serverless"]["image"] = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/kafscale:1"
    assert "both are set" in problems_of(data)["runner.emr_serverless.venv_archive"]


def test_emr_serverless_entry_point_must_be_on_s3() -> None:
    data = minimal()
    data["runner"] = emr_runner()
    data["runner"]["emr_serverless"]["entry_point"] = "spark_app/main.py"
    assert "must be an s3:// URI" in problems_of(data)["runner.emr_serverless.entry_point"]


def test_emr_serverless_needs_runs_on_s3() -> None:
    data = local()
    data["runner"] = emr_runner()
    assert "must be an s3:// URI when runner.type is 'emr_serverless'" in problems_of(data)["runs.location"]


def test_unknown_runner_type_is_rejected() -> None:
    data = minimal()
    data["runner"] = {"type": "kubernetes"}
    assert "'local', 'inline' or 'emr_serverless'" in problems_of(data)["runner.type"]


def test_local_spark_conf_values_become_text() -> None:
    data = local()
    data["runner"] = {"local": {"spark_conf": {"spark.sql.shuffle.partitions": 8, "spark.ui.enabled": False}}}
    conf = load(data).runner.local.spark_conf
    assert conf == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}


# ------------------------------------------------------------------------------------------------
# notifications


def test_s3_notification_queue_must_be_a_standard_queue() -> None:
    data = minimal()
    data["notifications"] = {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/segments.fifo"}
    assert "S3 cannot notify a FIFO queue" in problems_of(data)["notifications.queue_url"]


def test_work_queue_must_be_a_fifo_queue() -> None:
    data = minimal()
    data["notifications"] = {"work_queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/work"}
    assert "must be a FIFO queue" in problems_of(data)["notifications.work_queue_url"]


# ------------------------------------------------------------------------------------------------
# Dead-letter tables and partitioning


def test_dead_letter_table_bare_name_lives_in_the_table_namespace() -> None:
    data = minimal()
    data["mappings"][0]["dead_letter_table"] = "rejects"
    mapping = load(data).mappings[0]
    assert mapping.dead_letter_table == "shop.rejects"
    assert mapping.dead_letter_identifier == ("shop", "rejects")


def test_dead_letter_table_equal_to_the_table_is_rejected() -> None:
    data = minimal()
    data["mappings"][0]["dead_letter_table"] = "shop.orders"
    assert "must differ from the table" in problems_of(data)["mappings[0].dead_letter_table"]


def test_dead_letter_table_equal_to_another_mapping_table_is_rejected() -> None:
    data = minimal()
    data["mappings"].append({"topic": "clicks", "table": "web.clicks", "dead_letter_table": "shop.orders"})
    assert "table of another mapping" in problems_of(data)["mappings[1].dead_letter_table"]


def test_partition_fields_are_parsed_into_transform_and_column() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = [
        "topic",
        "identity(partition)",
        "Day(ordered_at)",
        "hours(ordered_at)",
    ]
    fields = load(data).mappings[0].partition_by
    assert fields == (
        PartitionField(column="topic", transform=PartitionTransform.IDENTITY),
        PartitionField(column="partition", transform=PartitionTransform.IDENTITY),
        PartitionField(column="ordered_at", transform=PartitionTransform.DAY),
        PartitionField(column="ordered_at", transform=PartitionTransform.HOUR),
    )
    assert describe_partition_field(fields[2]) == "day(ordered_at)"


def test_year_month_and_day_accept_a_date_column() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["year(order_date)", "month(order_date)", "day(order_date)"]
    assert len(load(data).mappings[0].partition_by) == 3


def test_time_transform_of_the_base_timestamp_ms_long_is_rejected() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["day(timestamp_ms)"]
    problem = problems_of(data)["mappings[0].partition_by[0]"]
    assert "day(timestamp_ms) needs a date or timestamp column" in problem
    assert "is long" in problem


def test_hour_of_a_date_column_is_rejected() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["hour(order_date)"]
    assert "needs a timestamp column" in problems_of(data)["mappings[0].partition_by[0]"]


def test_partition_by_an_unknown_column_is_rejected() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["day(created)"]
    assert "column 'created' is neither a base field" in problems_of(data)["mappings[0].partition_by[0]"]


@pytest.mark.parametrize("text", ["bucket[16](order_id)", "hash(order_id)", "bucket(16, order_id, 2)"])
def test_unsupported_partition_forms_are_rejected_with_the_allowed_forms(text: str) -> None:
    data = local()
    data["mappings"][0]["partition_by"] = [text]
    assert "identity(col), year(col)" in problems_of(data)["mappings[0].partition_by[0]"]


def test_bucket_and_truncate_are_parsed_with_their_parameter() -> None:
    data = local()
    data["mappings"][0]["schema"]["columns"].append({"name": "store", "type": "string"})
    data["mappings"][0]["partition_by"] = ["bucket(16, order_id)", "Truncate( 3 , store )"]
    fields = load(data).mappings[0].partition_by
    assert fields == (
        PartitionField(column="order_id", transform=PartitionTransform.BUCKET, parameter=16),
        PartitionField(column="store", transform=PartitionTransform.TRUNCATE, parameter=3),
    )
    assert [describe_partition_field(f) for f in fields] == ["bucket(16, order_id)", "truncate(3, store)"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("bucket(0, order_id)", "bucket needs N ≥ 1 (the number of buckets), got '0': write bucket(N, col)"),
        ("bucket(order_id)", "bucket needs N ≥ 1 (the number of buckets), got nothing"),
        ("bucket(many, order_id)", "got 'many'"),
        ("truncate(-2, order_id)", "truncate needs W ≥ 1 (the width to cut values to), got '-2'"),
        ("day(2, ordered_at)", "day takes only a column: day(col)"),
    ],
)
def test_a_partition_parameter_that_is_missing_or_not_positive_is_rejected(text: str, problem: str) -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["topic", text]
    assert problem in problems_of(data)["mappings[0].partition_by[1]"]


@pytest.mark.parametrize(
    ("column", "text", "problem"),
    [
        (
            "paid",
            "truncate(4, paid)",
            "truncate(4, paid) needs a binary, decimal, int, long or string column",
        ),
        ("score", "bucket(8, score)", "bucket(8, score) needs a binary, date, decimal, int, long, string, "),
        ("at", "truncate(10, at)", "but 'at' is timestamp"),
    ],
)
def test_bucket_and_truncate_of_a_type_iceberg_does_not_define_them_for_are_rejected(
    column: str, text: str, problem: str
) -> None:
    data = local()
    types = {"paid": "boolean", "score": "double", "at": "timestamp"}
    data["mappings"][0]["schema"]["columns"].append({"name": column, "type": types[column]})
    data["mappings"][0]["partition_by"] = [text]
    assert problem in problems_of(data)["mappings[0].partition_by[0]"]


def test_bucket_of_an_unknown_column_is_rejected() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["bucket(16, customer)"]
    assert "column 'customer' is neither a base field" in problems_of(data)["mappings[0].partition_by[0]"]


def test_two_buckets_of_one_column_are_rejected_as_one_partition_field_name() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["bucket(16, order_id)", "bucket(4, order_id)"]
    problem = problems_of(data)["mappings[0].partition_by[1]"]
    assert "second partition field named 'order_id_bucket'" in problem


def test_partition_field_listed_twice_is_rejected() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["topic", "identity(topic)"]
    assert problems_of(data)["mappings[0].partition_by[1]"] == "identity(topic) is listed twice"


def test_partition_by_lfs_metadata_column_needs_store_metadata() -> None:
    data = local()
    data["mappings"][0]["partition_by"] = ["lfs_content_type"]
    assert "mappings[0].partition_by[0]" in problems_of(data)
    data["mappings"][0]["lfs"] = {"store_metadata": True}
    assert load(data).mappings[0].partition_by[0].column == "lfs_content_type"


def test_registry_columns_are_checked_at_planning_not_at_load() -> None:
    data = minimal()
    data["schema"] = {"registry": {"base_url": "https://schemas.example.com"}}
    data["mappings"][0]["partition_by"] = ["day(created_at)"]
    assert load(data).mappings[0].partition_by[0].column == "created_at"


def test_per_mapping_overrides_win_over_runs_settings() -> None:
    data = minimal()
    data["mappings"][0].update(corrupt_segment_policy="Quarantine", target_file_size_bytes="64MiB")
    config = load(data)
    mapping = config.mappings[0]
    assert config.corrupt_segment_policy_for(mapping) == "quarantine"
    assert config.target_file_size_for(mapping) == 64 * 1024**2


def test_mapping_columns_become_run_plan_column_specs() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"columns": [{"name": "id", "type": "LONG", "required": True}]}
    mapping = load(data).mappings[0]
    assert mapping.column_specs() == (ColumnSpec(name="id", type=ColumnType.LONG, required=True),)


def test_mapping_for_finds_a_topic_and_returns_none_for_an_unmapped_one() -> None:
    data = minimal()
    data["mappings"].append({"topic": "clicks", "table": "web.clicks"})
    config = load(data)
    mapping = config.mapping_for("clicks")
    assert mapping is not None
    assert mapping.table == "web.clicks"
    assert config.mapping_for("payments") is None
    assert config.mapped_topics == {"orders", "clicks"}


# ------------------------------------------------------------------------------------------------
# Unknown keys, errors, secrets


def test_unknown_keys_are_warned_about_and_exposed(caplog: pytest.LogCaptureFixture) -> None:
    data = minimal()
    data["s3"]["namespce"] = "typo"
    data["mappings"][0]["schema"] = {"columns": [{"name": "id", "type": "long", "nullable": True}]}
    data["extra_section"] = {"a": 1}
    with caplog.at_level(logging.WARNING, logger="kafscale_iceberg.config"):
        config = load(data)
    expected = ("s3.namespce", "mappings[0].schema.columns[0].nullable", "extra_section")
    assert sorted(config.unknown_keys) == sorted(expected)
    logged = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    for key in expected:
        assert any(key in message for message in logged), key


def test_unknown_keys_are_listed_as_a_hint_when_the_file_is_invalid() -> None:
    data = minimal()
    data["mappings"][0]["tabel"] = data["mappings"][0].pop("table")
    with pytest.raises(ConfigValidationError) as info:
        load(data)
    assert "unknown keys (ignored; check their spelling): mappings[0].tabel" in str(info.value)


def test_free_form_maps_have_no_unknown_keys() -> None:
    data = local()
    data["iceberg"]["catalog"]["properties"] = {"anything.goes": "yes"}
    assert load(data).unknown_keys == ()


def test_every_problem_is_reported_together_one_per_line() -> None:
    data = minimal()
    data["s3"]["bucket"] = ""
    data["discovery"] = {"mode": "kafka"}
    data["offsets"] = {"backend": "noop"}
    data["mappings"][0]["lfs"] = {"mode": "inline"}
    data["mappings"].append(
        {"topic": "b", "table": "x.b", "schema": {"columns": [{"name": "a", "type": "uuid4"}]}}
    )
    with pytest.raises(ConfigValidationError) as info:
        load(data, {"KAFSCALE_ICEBERG_LFS_STORE_METADATA": "maybe"})
    keys = [key for key, _ in info.value.problems]
    assert keys == [
        "$KAFSCALE_ICEBERG_LFS_STORE_METADATA",
        "s3.bucket",
        "discovery.mode",
        "offsets.backend",
        "mappings[0].lfs.mode",
        "mappings[1].schema.columns[0].type",
    ]
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid configuration in test.yaml (6 problems):"
    assert [line.split(":")[0].strip() for line in lines[1:]] == keys


def test_config_errors_are_config_errors_naming_the_first_key() -> None:
    data = minimal()
    data["discovery"] = {"mode": "kafka"}
    with pytest.raises(ConfigError) as info:
        load(data)
    assert info.value.key == "discovery.mode"
    assert info.value.transient is False


def test_invalid_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("s3:\n  bucket: kafscale-data\nmappings: [\n  {topic: orders\n")
    with pytest.raises(ConfigValidationError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert str(path) in message
    assert re.search(r"invalid YAML at line \d+, column \d+", message)


def test_a_repeated_yaml_key_is_an_error_naming_its_line() -> None:
    with pytest.raises(ConfigValidationError) as info:
        parse_config("s3:\n  bucket: a\n  bucket: b\n", source="dup.yaml", environ={})
    assert "line 3, column 3: key 'bucket' is repeated in this mapping" in str(info.value)


def test_yaml_merge_keys_are_not_repeated_keys() -> None:
    text = SHIPPED_STYLE + "  - <<: &clicks {table: web.clicks}\n    topic: clicks\n"
    config = parse_config(text, source="t", environ={})
    mapping = config.mapping_for("clicks")
    assert mapping is not None
    assert mapping.table == "web.clicks"


def test_a_file_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(ConfigValidationError) as info:
        parse_config("- s3\n- iceberg\n", source="list.yaml", environ={})
    assert "must be a YAML mapping of sections" in str(info.value)


def test_an_empty_file_reports_the_required_keys() -> None:
    with pytest.raises(ConfigValidationError) as info:
        parse_config("", source="empty.yaml", environ={})
    keys = {key for key, _ in info.value.problems}
    assert {"s3.bucket", "iceberg.catalog.type"} <= keys


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError) as info:
        load_config(tmp_path / "absent.yaml", environ={})
    assert "cannot read the file" in str(info.value)


def test_s3_locations_are_left_to_the_s3_adapter() -> None:
    with pytest.raises(ConfigValidationError) as info:
        load_config("s3://bucket/config.yaml", environ={})
    assert "parse_config" in str(info.value)


def test_secrets_never_appear_in_repr_or_str() -> None:
    data = minimal()
    data["iceberg"]["catalog"].update(token=SECRET + "-token", username="client", password=SECRET)
    data["etcd"]["password"] = SECRET
    data["iceberg"]["catalog"]["properties"] = {"s3.secret-access-key": SECRET}
    config = load(data)
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert config.iceberg.catalog.password.get_secret_value() == SECRET
    assert config.etcd.password.get_secret_value() == SECRET
    assert config.iceberg.catalog.token.get_secret_value() == SECRET + "-token"


def test_a_password_in_the_catalog_uri_is_kept_out_of_repr_and_errors() -> None:
    data = local()
    data["iceberg"]["catalog"]["uri"] = f"postgresql://kafscale:{SECRET}@db.internal/catalog"
    config = load(data)
    assert SECRET not in repr(config)
    assert config.iceberg.catalog.uri.endswith("@db.internal/catalog")
    data["iceberg"]["catalog"] = {"type": "rest", "uri": f"ftp://kafscale:{SECRET}@catalog.internal"}
    problem = problems_of(data)["iceberg.catalog.uri"]
    assert "ftp://kafscale:***@catalog.internal" in problem
    assert SECRET not in problem


def test_secrets_never_appear_in_error_messages() -> None:
    data = minimal()
    data["etcd"]["password"] = SECRET
    data["iceberg"]["catalog"]["password"] = 918273645  # invalid (not text), and still not echoed
    data["iceberg"]["catalog"]["properties"] = {"key": 5.5j}
    del data["s3"]["bucket"]
    with pytest.raises(ConfigValidationError) as info:
        load(data)
    assert set(dict(info.value.problems)) >= {"iceberg.catalog.password", "iceberg.catalog.properties.key"}
    assert SECRET not in str(info.value)
    assert "918273645" not in str(info.value)
    assert "5.5j" not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__ is True


def test_secrets_never_appear_in_yaml_syntax_errors() -> None:
    with pytest.raises(ConfigValidationError) as info:
        parse_config(f"etcd:\n  password: {SECRET}: oops\n", source="t", environ={})
    assert "line 2" in str(info.value)
    assert SECRET not in str(info.value)


def test_the_config_is_frozen() -> None:
    config = load(minimal())
    with pytest.raises(pydantic.ValidationError):
        config.s3.bucket = "other"


def test_documented_complete_examples_load() -> None:
    text = (REPO / "docs" / "configuration.md").read_text()
    examples = re.findall(r"<!-- complete-example -->\n```yaml\n(.*?)```", text, flags=re.DOTALL)
    assert len(examples) == 2
    configs = [parse_config(example, source="docs/configuration.md", environ={}) for example in examples]
    assert [config.unknown_keys for config in configs] == [(), ()]
    assert configs[0].runs.location == "file:///var/lib/kafscale-iceberg/warehouse/_kafscale_runs"
    assert configs[1].runner.type == "emr_serverless"


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_config_pulls_no_heavy_dependency() -> None:
    heavy = ["boto3", "botocore", "pyarrow", "pyspark", "pyiceberg", "numpy", "numba", "etcd3"]
    code = f"import sys, kafscale_iceberg.config; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_nested_and_wider_column_types_load_into_plan_columns() -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {
        "columns": [
            {"name": "amount", "type": "Decimal(10, 2)", "required": True},
            {"name": "id", "type": "uuid"},
            {"name": "at", "type": "timestamptz"},
            {"name": "customer", "type": "struct", "fields": [{"name": "name", "type": "string"}]},
            {"name": "tags", "type": "list", "element": {"type": "string"}},
            {"name": "prices", "type": "map", "value": {"type": "decimal", "precision": 6, "scale": 2}},
        ]
    }
    columns = load(data).mappings[0].column_specs()
    assert [c.type_name for c in columns] == [
        "decimal(10,2)",
        "uuid",
        "timestamptz",
        "struct<name: string>",
        "list<string>",
        "map<string, decimal(6,2)>",
    ]
    assert columns[0].required


@pytest.mark.parametrize(
    ("column", "key", "problem"),
    [
        ({"name": "s", "type": "struct"}, "fields", "is required for a struct column"),
        ({"name": "l", "type": "list"}, "element", "is required for a list column"),
        ({"name": "m", "type": "map"}, "value", "is required for a map column"),
        ({"name": "d", "type": "decimal(40,2)"}, "type", "decimal needs a precision of 1 to 38"),
        ({"name": "d", "type": "decimal(4,5)"}, "type", "decimal scale must be between 0 and the precision"),
        ({"name": "x", "type": "long", "element": {"type": "long"}}, "element", "and only for one"),
        (
            {
                "name": "s",
                "type": "struct",
                "fields": [{"name": "a", "type": "long"}, {"name": "a", "type": "int"}],
            },
            "fields[1].name",
            "'a' is listed twice",
        ),
    ],
)
def test_nested_column_problems_name_their_key(column: dict[str, Any], key: str, problem: str) -> None:
    data = minimal()
    data["mappings"][0]["schema"] = {"columns": [column]}
    assert problem in problems_of(data)[f"mappings[0].schema.columns[0].{key}"]
