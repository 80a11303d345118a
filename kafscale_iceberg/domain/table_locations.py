"""Where a table's data files go: always under the table's own data location.

A table's data location is its `write.data.path` property, else `{location}/data` (Iceberg's rule).
A run writes its files to `{data location}/kafscale/{run_id}/`, and compaction to
`{data location}/kafscale/{job_id}/`, so orphan cleanup looks only under `{data location}/kafscale/`.

The launcher has no catalog client: it knows a table's data location from `field-ids.json`
(`TableFieldIds.data_location`, recorded by the commit step). A table that does not exist yet is
created by this product at `{warehouse}/{namespace}.db/{table}` when `iceberg.warehouse` is a storage
URI (pyiceberg's layout; the adapter passes it on create), so its data location is known before it
exists. A catalog whose warehouse is a name or a table bucket ARN (a REST catalog, Amazon S3 Tables)
chooses the location itself: a run planned before the table exists cannot know it, and the commit
step refuses that run as a stale plan once it has created the table (`TableLocationUnknownError`),
records the location, and the next attempt (planned at once) writes under it. Table buckets refuse
objects outside their tables, so there is no fallback location.
"""

from __future__ import annotations

KAFSCALE_DATA_FOLDER = "kafscale"
"""The folder of a table's data location holding this product's files (runs' and compactions')."""

STORAGE_SCHEMES = ("s3://", "s3a://", "gs://", "abfss://", "file://", "/")


def is_storage_location(uri: str) -> bool:
    """Whether `uri` is a storage location (`s3://…`, `file://…`, an absolute path), not a name or ARN."""
    return uri.startswith(STORAGE_SCHEMES)


def table_path(identifier: str) -> str:
    """A table's folder under the warehouse: `{namespace}.db/{table}` (pyiceberg's layout)."""
    *namespace, name = identifier.split(".")
    return f"{'.'.join(namespace)}.db/{name}" if namespace else name


def created_table_location(warehouse: str, identifier: str) -> str | None:
    """Where this product creates `identifier`: `{warehouse}/{namespace}.db/{table}` for a storage
    warehouse; None (the catalog chooses) for a warehouse name or table bucket ARN."""
    warehouse = warehouse.rstrip("/")
    if not is_storage_location(warehouse):
        return None
    return f"{warehouse}/{table_path(identifier)}"


def data_location_of(location: str, properties: dict[str, str]) -> str:
    """A table's data location: its `write.data.path`, else `{location}/data`."""
    explicit = properties.get("write.data.path", "").rstrip("/")
    return explicit or f"{location.rstrip('/')}/data"


def kafscale_data_prefix(data_location: str) -> str:
    """The folder of `data_location` holding this product's files (one subfolder per run or job)."""
    return f"{data_location.rstrip('/')}/{KAFSCALE_DATA_FOLDER}"


def is_under(uri: str, location: str) -> bool:
    """Whether `uri` is inside the folder `location` (`s3a://` and `s3://` alike)."""

    def normal(value: str) -> str:
        return "s3://" + value[len("s3a://") :] if value.startswith("s3a://") else value

    return normal(uri).startswith(normal(location).rstrip("/") + "/")
