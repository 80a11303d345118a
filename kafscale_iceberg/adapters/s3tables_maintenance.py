"""Whether Amazon S3 Tables compacts a table itself (its table maintenance configuration), with boto3.

`maintain` leaves compaction to S3 Tables where its compaction is on for the table, and `status` says
so (`TableHealth.managed_compaction`). Only an explicit `enabled` counts: a configuration that does
not name compaction (SeaweedFS answers `{}`) leaves compaction to `maintain`, so a table is never left
uncompacted by a wrong guess; compacting a table S3 Tables also compacts costs work, not correctness.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.adapters.foreign_errors import is_unreachable
from kafscale_iceberg.exceptions import CatalogError, CatalogUnavailableError


class S3TablesCompactionProbe:
    """Reads `GetTableMaintenanceConfiguration` of the tables of one table bucket."""

    def __init__(self, table_bucket_arn: str, client: Any) -> None:
        """`client` is a boto3 `s3tables` client (its endpoint and region: the table bucket's)."""
        self._arn = table_bucket_arn
        self._client = client

    def compacts(self, table: str) -> bool:
        """True when S3 Tables' compaction is enabled for `table` (`namespace.name`). Reads only.

        Raises `CatalogUnavailableError` (transient) or `CatalogError` naming the table and bucket."""
        namespace, _, name = table.rpartition(".")
        try:
            answer = self._client.get_table_maintenance_configuration(
                tableBucketARN=self._arn, namespace=namespace, name=name
            )
        except (ClientError, BotoCoreError) as exc:
            operation = f"read the maintenance configuration of {table!r} in {self._arn}"
            if is_unreachable(exc):
                raise CatalogUnavailableError("s3tables", operation, str(exc)) from exc
            raise CatalogError(
                "s3tables", operation, f"{exc} (the role needs s3tables:GetTableMaintenanceConfiguration)"
            ) from exc
        compaction = (answer.get("configuration") or {}).get("icebergCompaction") or {}
        return compaction.get("status") == "enabled"
