"""The tests' one-machine config: `local.config_document.one_machine_document` over the session's moto
server and etcd.

S3 is moto (or `endpoint`, a proxy in front of it) in moto's region; with `etcd_url` the offsets are
under a fresh key prefix, so tests sharing the session's etcd never meet; without it, in the SQLite
store under `root`. The catalog is `sql_settings(root)` (`tests/support/iceberg_runs.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

from kafscale_iceberg.local.config_document import one_machine_document
from tests.support.moto import MotoEndpoint


def local_document(
    root: Path,
    moto: MotoEndpoint | None,
    *,
    bucket: str,
    mappings: Sequence[Mapping[str, Any]],
    etcd_url: str | None = None,
    namespace: str | None = None,
    endpoint: str | None = None,
    **sections: Mapping[str, Any],
) -> dict[str, Any]:
    """The document; `moto=None` for a world that never reads S3 (no endpoint, no region). Runs start
    at once (`runs.min_bytes_per_run` 0) unless `runs` says otherwise: the tests' segments are tiny."""
    sections = {**sections, "runs": {"min_bytes_per_run": 0, **sections.get("runs", {})}}
    if etcd_url is not None:
        sections = {
            **sections,
            "offsets": {"key_prefix": f"t-{uuid4().hex[:8]}", **sections.get("offsets", {})},
        }
    return one_machine_document(
        root,
        bucket=bucket,
        mappings=mappings,
        namespace=namespace,
        endpoint=endpoint or (moto.url if moto is not None else None),
        region=moto.region if moto is not None else None,
        etcd_endpoints=[etcd_url] if etcd_url is not None else [],
        **sections,
    )
