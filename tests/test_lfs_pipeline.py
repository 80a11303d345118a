"""LFS end to end: plans carry the settings, Spark resolves, the commit lands rows, metadata, dead letters.

Real parts: moto server (segments and blobs in one bucket, as KafScale's proxy and broker share it in
the demo), a real etcd, a pyiceberg SQLite catalog with a file warehouse, the local Spark runner
(warm session) or `kafscale-iceberg run --once` as a process. Envelopes and blobs are built as the
LFS proxy builds them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import iceberg_type
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping, load_config
from kafscale_iceberg.domain.schema import BASE_FIELDS
from kafscale_iceberg.local.pipeline import Pipeline
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.metrics import PrometheusMetricsSink, record_commit
from kafscale_iceberg.segments.lfs import ChecksumAlg, ProxiedValue, blob_key, proxy_value
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

NAMESPACE = "prod"
TOPIC = "images"
WHEN = datetime(2026, 11, 20, tzinfo=UTC)
LFS_COLUMNS = (
    "lfs_content_type",
    "lfs_blob_size",
    "lfs_checksum",
    "lfs_checksum_alg",
    "lfs_bucket",
    "lfs_key",
)


def _proxied(bucket: str, n: int, alg: ChecksumAlg) -> ProxiedValue:
    payload = f"image-{n}:".encode() + bytes(range(256)) * (n + 1)
    key = blob_key(NAMESPACE, TOPIC, at=WHEN, object_id=UUID(int=n + 1))
    return proxy_value(
        payload, bucket=bucket, key=key, checksum_alg=alg, headers={"content-type": "image/png"}
    )


def _upload(s3: Any, bucket: str, values: list[ProxiedValue], *, skip: int | None = None) -> None:
    for n, proxied in enumerate(values):
        if n != skip:
            s3.put_object(Bucket=bucket, Key=proxied.blob_key, Body=proxied.blob)


def _go_processor_table(catalog: Catalog, identifier: str) -> None:
    """The table KafScale's Go processor creates for a mapping with `lfs.store_metadata`: base fields
    1-8, then the six `lfs_*` columns (ids 9-14), its properties only (no name mapping)."""
    namespace, name = identifier.split(".")
    catalog.create_namespace_if_not_exists(namespace)
    base = [
        NestedField(f.field_id or 0, f.name, iceberg_type(f.type), required=f.required) for f in BASE_FIELDS
    ]
    lfs = [
        NestedField(9 + i, column, LongType() if column == "lfs_blob_size" else StringType(), required=False)
        for i, column in enumerate(LFS_COLUMNS)
    ]
    location = f"{catalog.properties['warehouse']}/{namespace}/{name}"
    catalog.create_table(
        identifier,
        Schema(*base, *lfs),
        properties={
            "write.format.default": "parquet",
            "write.data.path": f"{location}/data",
            "write.metadata.path": f"{location}/metadata",
        },
    )


@pytest.mark.slow
def test_a_go_processor_table_is_resolved_into_with_metadata_and_dead_letters(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, spark: SparkSession
) -> None:
    s3: Any = moto_server.client("s3")
    bucket = moto_server.new_bucket()
    algs = list(ChecksumAlg)
    values = [_proxied(bucket, n, algs[n % len(algs)]) for n in range(6)]
    _upload(s3, bucket, values, skip=4)  # offset 5's blob was never uploaded (offset 0 is plain)
    plain = b'{"note": "not an envelope"}'
    put_segment(s3, bucket, NAMESPACE, TOPIC, 0, 0, 7, values=[plain, *(v.value for v in values)])
    config = config_from_mapping(
        local_document(
            tmp_path,
            moto_server,
            bucket=bucket,
            namespace=NAMESPACE,
            etcd_url=etcd_server.url,
            offsets={"lease_ttl_seconds": 30},
            runs={"retry_backoff_seconds": 0},
            mappings=[
                {
                    "topic": TOPIC,
                    "table": "media.images",
                    "lfs": {"mode": "resolve", "store_metadata": True, "resolve_concurrency": 3},
                }
            ],
        ),
        source="test",
    )
    catalog = load_iceberg_catalog(CatalogSettings.from_config(config))
    _go_processor_table(catalog, "media.images")
    assembly = Assembly(config, owner_id="test-lfs")
    pipeline = Pipeline(
        assembly, LocalSparkJobRunner(master="local[2]", s3=assembly.s3_settings), watch_interval_s=0.1
    )

    summary = pipeline.run_once()

    assert summary.ok, summary
    (report,) = summary.runs
    assert (report.records, report.dead_lettered, report.lfs_resolved) == (6, 1, 5)
    assert report.lfs_errors == {"missing_blob": 1}
    table = catalog.load_table("media.images")
    assert [f.field_id for f in table.schema().fields] == list(range(1, 15))  # the Go table, as it was
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4, 6]
    assert rows[0]["value"] == plain
    assert rows[0]["lfs_key"] is None
    for row in rows[1:]:
        proxied = values[row["offset"] - 1]
        envelope = proxied.envelope
        assert row["value"] == proxied.blob
        assert row["lfs_key"] == envelope.key
        assert row["lfs_bucket"] == bucket
        assert row["lfs_blob_size"] == len(proxied.blob)
        assert row["lfs_content_type"] == "image/png"
        assert row["lfs_checksum_alg"] == envelope.checksum_alg
        assert row["lfs_checksum"] == (envelope.checksum or envelope.sha256)
    dead = catalog.load_table("media.images__dlq").scan().to_arrow().to_pylist()
    assert [(d["offset"], d["error_kind"]) for d in dead] == [(5, "lfs_missing_blob")]
    assert values[4].blob_key in dead[0]["error"]
    assert dead[0]["value"] == values[4].value

    sink = PrometheusMetricsSink()
    assert report.commit is not None
    record_commit(
        sink, report.commit.plan, report.commit.result, report.commit.outcome, started_at=0, ended_at=1
    )
    text = sink.exposition().decode()
    assert f'kafscale_processor_lfs_resolved_total{{topic="{TOPIC}"}} 5.0' in text
    resolved_bytes = sum(len(v.blob) for n, v in enumerate(values) if n != 4)
    assert f'kafscale_processor_lfs_resolved_bytes_total{{topic="{TOPIC}"}} {float(resolved_bytes)}' in text
    assert (
        f'kafscale_processor_lfs_resolution_errors_total{{reason="missing_blob",topic="{TOPIC}"}} 1.0' in text
    )
    assert f'kafscale_processor_lfs_resolution_duration_seconds_count{{topic="{TOPIC}"}} 5.0' in text
    assert f'kafscale_processor_records_total{{result="invalid",topic="{TOPIC}"}} 1.0' in text


@pytest.mark.slow
def test_run_once_follows_the_lfs_environment_overrides(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    """The config file says `lfs.mode: off` (unquoted, as KafScale ships it); the environment turns
    on resolve with metadata for every mapping, as the Go processor's overrides do."""
    s3: Any = moto_server.client("s3")
    bucket = moto_server.new_bucket()
    values = [_proxied(bucket, n, ChecksumAlg.SHA256) for n in range(3)]
    _upload(s3, bucket, values)
    put_segment(s3, bucket, NAMESPACE, TOPIC, 0, 0, 3, values=[v.value for v in values])
    config_path = tmp_path / "config.yaml"
    text = yaml.safe_dump(
        local_document(
            tmp_path,
            moto_server,
            bucket=bucket,
            namespace=NAMESPACE,
            etcd_url=etcd_server.url,
            mappings=[{"topic": TOPIC, "table": "media.images", "create_table_if_missing": True}],
        )
    )
    config_path.write_text(
        text.replace("create_table_if_missing: true", "create_table_if_missing: true\n  lfs:\n    mode: off")
    )
    assert load_config(config_path, environ={}).mappings[0].lfs.mode == "off"
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "KAFSCALE_METRICS_ADDR": "127.0.0.1:0",
        "KAFSCALE_ICEBERG_LFS_MODE": "resolve",
        "KAFSCALE_ICEBERG_LFS_STORE_METADATA": "true",
        "KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY": "2",
    }

    done = subprocess.run(
        [sys.executable, "-m", "kafscale_iceberg.cli", "run", "--config", str(config_path), "--once"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 run committed, 3 records" in done.stderr
    assert "3 LFS blobs resolved" in done.stderr
    config = load_config(config_path, environ={})
    table = load_iceberg_catalog(CatalogSettings.from_config(config)).load_table("media.images")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [r["value"] for r in rows] == [v.blob for v in values]
    assert [r["lfs_key"] for r in rows] == [v.blob_key for v in values]
