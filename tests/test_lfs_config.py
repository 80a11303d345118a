"""`mappings[].lfs` and the `KAFSCALE_ICEBERG_LFS_*` overrides reach the run plan, each doing what it says."""

from __future__ import annotations

from typing import Any

import pytest

from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.runs import (
    LFS_METADATA_COLUMNS,
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    LfsMode,
)
from kafscale_iceberg.exceptions import ConfigValidationError


def _config(lfs: dict[str, Any] | None = None, environ: dict[str, str] | None = None, **mapping: Any) -> Any:
    data = {
        "s3": {"bucket": "kafscale-data", "region": "eu-west-1"},
        "iceberg": {"catalog": {"type": "rest", "uri": "https://catalog.example.com"}},
        "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
        "runs": {"location": "s3://runs-bucket/runs"},
        "mappings": [{"topic": "images", "table": "media.images", "lfs": lfs or {}, **mapping}],
    }
    return config_from_mapping(data, source="test.yaml", environ=environ or {})


def test_every_lfs_key_reaches_the_plan() -> None:
    config = _config(
        {
            "mode": "HYBRID",
            "max_inline_size": 4096,
            "store_metadata": True,
            "validate_checksum": False,
            "resolve_concurrency": 9,
            "blob_buckets": ["lfs-blobs", "kafscale-data"],
        }
    )
    settings = config.mappings[0].lfs_settings(config.s3.bucket)
    assert settings.mode is LfsMode.HYBRID
    assert (settings.max_inline_size, settings.store_metadata, settings.validate_checksum) == (
        4096,
        True,
        False,
    )
    assert settings.resolve_concurrency == 9
    assert settings.buckets == ("kafscale-data", "lfs-blobs")  # the segment bucket first, once


def test_environment_overrides_reach_the_plan_of_every_mapping() -> None:
    config = _config(
        {"mode": "off"},
        environ={
            "KAFSCALE_ICEBERG_LFS_MODE": "resolve",
            "KAFSCALE_ICEBERG_LFS_MAX_INLINE_SIZE": "1048576",
            "KAFSCALE_ICEBERG_LFS_STORE_METADATA": "true",
            "KAFSCALE_ICEBERG_LFS_VALIDATE_CHECKSUM": "false",
            "KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY": "0",
        },
    )
    settings = config.mappings[0].lfs_settings(config.s3.bucket)
    assert (settings.mode, settings.max_inline_size) == (LfsMode.RESOLVE, 1048576)
    assert (settings.store_metadata, settings.validate_checksum) == (True, False)
    assert settings.resolve_concurrency == 4  # 0 means the default, as in Go


def test_defaults_are_off_with_only_the_segment_bucket() -> None:
    config = _config()
    settings = config.mappings[0].lfs_settings(config.s3.bucket)
    assert (settings.mode, settings.buckets, settings.resolve_concurrency) == (
        LfsMode.OFF,
        ("kafscale-data",),
        4,
    )


def test_a_single_blob_bucket_may_be_written_as_a_string() -> None:
    config = _config({"mode": "resolve", "blob_buckets": "lfs-blobs"})
    assert config.mappings[0].lfs.blob_buckets == ("lfs-blobs",)


def test_a_mapping_column_named_like_lfs_metadata_must_keep_its_type() -> None:
    with pytest.raises(ConfigValidationError) as info:
        _config(
            {"store_metadata": True},
            schema={"columns": [{"name": "lfs_blob_size", "type": "string"}]},
        )
    problems = dict(info.value.problems)
    assert "filled from LFS metadata" in problems["mappings[0].schema.columns[0].type"]


def test_store_metadata_adds_the_go_columns_after_the_mapping_ones() -> None:
    settings = ConversionSettings(
        columns=(
            ColumnSpec(name="lfs_key", type=ColumnType.STRING),
            ColumnSpec(name="n", type=ColumnType.LONG),
        ),
        lfs={"mode": "reference", "store_metadata": True},
    )
    assert [c.name for c in settings.table_columns] == [
        "lfs_key",
        "n",
        *(c.name for c in LFS_METADATA_COLUMNS if c.name != "lfs_key"),
    ]
    assert ConversionSettings(lfs={"mode": "resolve"}).table_columns == ()
