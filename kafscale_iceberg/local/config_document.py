"""The config document of `kafscale-iceberg run` on one machine, written once.

The demo writes it for its user; the benchmarks and the tests build their worlds from it (the tests
through `tests/support/config_documents.py`). What it holds: the segment bucket (path-style S3 at a
local endpoint when one is given), a SQLite Iceberg catalog `catalog.db` with the warehouse
`warehouse/` under the working directory, the offsets in etcd when endpoints are given, else in the
embedded SQLite store `offsets.sqlite` beside them, and the mappings. Everything else is a keyword
section merged over these, one level deep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def one_machine_document(
    workdir: Path,
    *,
    bucket: str,
    mappings: Sequence[Mapping[str, Any]],
    namespace: str | None = None,
    endpoint: str | None = None,
    region: str | None = None,
    etcd_endpoints: Sequence[str] = (),
    **sections: Mapping[str, Any],
) -> dict[str, Any]:
    """The document (the YAML file's content as plain data) for `workdir`.

    `sections` name top-level sections (`runs`, `processor`, `runner`, `notifications`, `offsets`,
    `iceberg`, ...); each is merged over what this builds, key by key: `offsets={"lease_ttl_seconds":
    2}` keeps the store, `iceberg={"catalog": {...}}` replaces the catalog and keeps the warehouse.
    The mappings come last, as a person writes the file.
    """
    s3: dict[str, Any] = {"bucket": bucket}
    if namespace is not None:
        s3["namespace"] = namespace
    if endpoint is not None:
        s3["endpoint"] = endpoint
    if region is not None:
        s3["region"] = region
    if endpoint is not None:
        s3["path_style"] = True  # a local S3 (moto, MinIO) has no virtual-host names
    document: dict[str, Any] = {
        "s3": s3,
        "iceberg": {
            "catalog": {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db"},
            "warehouse": f"file://{workdir}/warehouse",
        },
    }
    if etcd_endpoints:
        document["etcd"] = {"endpoints": list(etcd_endpoints)}
    else:
        document["offsets"] = {"backend": "sqlite", "sqlite_path": str(workdir / "offsets.sqlite")}
    for name, section in sections.items():
        document[name] = {**document.get(name, {}), **section}
    document["mappings"] = [dict(mapping) for mapping in mappings]
    return document
