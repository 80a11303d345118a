"""What the data plane needs from storage, as Protocols; adapters implement them.

`kafscale_iceberg.adapters.documents.DocumentStore` reads segments (`s3://bucket/key` or a local
path) and `kafscale_iceberg.adapters.data_files.StagedFileStore` publishes finished Parquet files.
Any `KafscaleIcebergError` they raise while reading a segment makes the run fail as
`segment_unavailable`.
"""

from __future__ import annotations

from kafscale_iceberg.domain.runs import SegmentSource


def segment_uri(source: SegmentSource, key: str) -> str:
    """Where a segment key is read from: `s3://{bucket}/{key}` or `{root}/{key}`."""
    if source.bucket is not None:
        return f"s3://{source.bucket}/{key}"
    assert source.root is not None  # the model guarantees exactly one
    return f"{source.root.rstrip('/')}/{key}"


def join_uri(base: str, name: str) -> str:
    """`base/name` with exactly one slash between (s3://, file:// and plain paths alike)."""
    return f"{base.rstrip('/')}/{name.lstrip('/')}"
