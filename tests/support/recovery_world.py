"""One topic on the one-machine pipeline (`run --once`), killed at a chosen step, with maintenance and
manual deletes between the runs, checked against a model of each key's last state: what the recovery
tests (`tests/test_recovery.py`) and the crash harness (`tests/test_chaos.py`) share; the dying
adapters are `tests/support/dying.py`'s (`Point`: where a process dies).

Real parts: moto S3, the SQLite checkpoint store, a pyiceberg SQLite catalog, the in-process runner
(the Spark job's task code without a JVM), the real maintenance service (its clock moved past the
orphan grace instead of waiting it out).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafscale_iceberg.adapters.file_listing import StorageFileLister
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.execution.job_runner import InProcessJobRunner
from kafscale_iceberg.local.pipeline import OnceSummary, Pipeline, PipelineObserver
from kafscale_iceberg.services.maintenance import MaintenanceReport, MaintenanceService
from tests.support.config_documents import local_document
from tests.support.dying import DyingCheckpoints, DyingTables, ProcessDied, die, expire_dead_lease
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

NAMESPACE, TOPIC, TABLE, DLQ = "prod", "orders", "shop.orders", "shop.orders__dlq"
BAD = b"not json"
"""A record that converts in no mode: a dead letter."""


@dataclass
class RecoveryWorld:
    """One topic (`TOPIC`, partition 0) landing in `TABLE` (`upsert` on key `id`, or `append`), the
    model of what it must hold kept beside it."""

    moto: MotoEndpoint
    root: Path
    mode: str = "upsert"
    etcd_url: str | None = None
    """The checkpoint store's etcd (None: the SQLite store)."""
    s3: Any = field(init=False)
    bucket: str = field(init=False)
    next_offset: int = 0
    last_state: dict[int, str | None] = field(default_factory=dict)
    """Upsert: each key's last name (None: deleted). Append: unused."""
    appended: list[tuple[int, str]] = field(default_factory=list)
    """Append: every good record's (id, name), in offset order."""
    bad_offsets: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.s3 = self.moto.client("s3")
        self.bucket = self.moto.new_bucket()
        mapping: dict[str, Any] = {
            "topic": TOPIC,
            "table": TABLE,
            "create_table_if_missing": True,
            "schema": {
                "columns": [
                    {"name": "id", "type": "long", "required": True},
                    {"name": "name", "type": "string"},
                ]
            },
        }
        if self.mode == "upsert":
            mapping |= {"mode": "upsert", "upsert": {"key": ["id"]}}
        document = local_document(
            self.root,
            self.moto,
            bucket=self.bucket,
            namespace=NAMESPACE,
            etcd_url=self.etcd_url,
            runs={"retry_backoff_seconds": 0},
            runner={"type": "inline", "inline": {"workers": 2}},
            offsets={"lease_ttl_seconds": 120},  # a loaded machine never loses it by stalling
            maintenance={"orphan_grace": 1},
            mappings=[mapping],
        )
        self.config = config_from_mapping(document, source="test")
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        self.runner: InProcessJobRunner | None = None

    # -- input ---------------------------------------------------------------------------------------

    def put(self, changes: list[tuple[int, str | None] | bytes]) -> None:
        """A segment: `(id, name)` upserts (name None: the key's tombstone, upsert mode) or raw bytes
        (a record that dead-letters)."""
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for offset, change in enumerate(changes, start=self.next_offset):
            if isinstance(change, bytes):
                keys.append(None)
                values.append(change)
                self.bad_offsets.append(offset)
                continue
            key, name = change
            keys.append(json.dumps({"id": key}).encode())
            values.append(None if name is None else json.dumps({"id": key, "name": name}).encode())
            if self.mode == "upsert":
                self.last_state[key] = name
            elif name is not None:
                self.appended.append((key, name))
        first, count = self.next_offset, len(changes)
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, 0, first, count, keys=keys, values=values)
        self.next_offset += len(changes)

    # -- processes -----------------------------------------------------------------------------------

    def pipeline(
        self,
        kill: str | None = None,
        owner: str = "test",
        observer: PipelineObserver | None = None,
        checkpoints: Callable[[Any], Any] | None = None,
        act: Callable[[str], None] = die,
    ) -> Pipeline:
        """A process (owner `owner`) that dies at `kill` (a `Point`) when given - or does `act` there,
        e.g. starts an etcd outage; `checkpoints` wraps its store."""
        assembly = Assembly(self.config, owner_id=owner)
        if self.runner is None:
            self.runner = InProcessJobRunner(workers=2, s3=assembly.s3_settings)
        if kill is not None:
            assembly.__dict__["tables"] = DyingTables(
                assembly.tables, kill, table=TABLE, dead_letters=DLQ, act=act
            )
            assembly.__dict__["checkpoints"] = DyingCheckpoints(assembly.checkpoints, kill, act=act)
        if checkpoints is not None:
            assembly.__dict__["checkpoints"] = checkpoints(assembly.checkpoints)
        return Pipeline(
            assembly, self.runner, watch_interval_s=0.05, observer=observer, outage_backoff_s=(0.2, 1.0)
        )

    def run_once(
        self, kill: str | None = None, observer: PipelineObserver | None = None
    ) -> OnceSummary | None:
        """One `run --once`; None when the process died at `kill` (a `Point`)."""
        try:
            return self.pipeline(kill, observer=observer).run_once(busy_wait_s=0)
        except ProcessDied:
            return None

    def run_once_through_an_outage(
        self, point: str, start: Callable[[], None], end: Callable[[], None]
    ) -> OnceSummary:
        """One `run --once` during which an outage `start`s at `point` (once) and lasts the rest of the
        process; `end`ed after it exits."""
        started: list[str] = []

        def outage(at: str) -> None:
            if not started:
                started.append(at)
                start()

        try:
            return self.pipeline(point, act=outage).run_once(busy_wait_s=0)
        finally:
            if started:
                end()

    def expire_lease(self) -> None:
        """The dead process's lease is gone (as its TTL would make it), without waiting for it."""
        expire_dead_lease(self.config, TOPIC)

    def maintain(self, *, compact: bool = False) -> MaintenanceReport:
        """A `maintain` pass seen from two days later: every unreferenced file is past the grace."""
        assembly = Assembly(self.config, owner_id="maintain")
        service = MaintenanceService(
            self.config,
            assembly.table_maintainer,
            StorageFileLister(assembly.s3_settings),
            assembly.checkpoints,
            assembly.documents,
            clock=lambda: time.time() + 2 * 86400,
        )
        return service.maintain(force_compaction=compact)

    def delete_unreferenced_files(self) -> list[str]:
        """What an operator's `aws s3 rm` of every data file no snapshot references does (the tables'
        data live under the local warehouse here); the files deleted."""
        referenced = {
            f for table in (TABLE, DLQ) if self.catalog.table_exists(table) for f in self._referenced(table)
        }
        warehouse = Path(self.config.iceberg.warehouse.removeprefix("file://"))
        deleted = []
        for path in sorted(warehouse.rglob("*.parquet")):
            if f"file://{path}" not in referenced and "/data/" in str(path):
                path.unlink()
                deleted.append(f"file://{path}")
        return deleted

    # -- checks --------------------------------------------------------------------------------------

    def _referenced(self, table: str) -> set[str]:
        return {task.file.file_path for task in self.catalog.load_table(table).scan().plan_files()}

    def missing_referenced_files(self) -> list[str]:
        """Files a current snapshot references that do not exist."""
        missing = []
        for table in (TABLE, DLQ):
            if not self.catalog.table_exists(table):
                continue
            io = self.catalog.load_table(table).io
            missing += [uri for uri in self._referenced(table) if not io.new_input(uri).exists()]
        return missing

    def problems(self) -> list[str]:
        """Everything that differs from the model: lost, duplicated or stale keys, dead letters lost or
        doubled, a file referenced but missing, offsets not at the end."""
        found: list[str] = []
        rows = self.catalog.load_table(TABLE).scan().to_arrow().to_pylist()
        if self.mode == "upsert":
            by_key: dict[int, str | None] = {}
            for row in rows:
                if row["id"] in by_key:
                    found.append(f"key {row['id']} duplicated")
                by_key[row["id"]] = row["name"]
            expected = {k: v for k, v in self.last_state.items() if v is not None}
            for key in sorted(set(expected) | set(by_key)):
                if key not in by_key:
                    found.append(f"key {key} lost")
                elif key not in expected:
                    found.append(f"key {key} resurrected")
                elif by_key[key] != expected[key]:
                    found.append(f"key {key} stale: {by_key[key]!r}, expected {expected[key]!r}")
        elif sorted((r["id"], r["name"]) for r in rows) != sorted(self.appended):
            found.append(f"rows {sorted((r['id'], r['name']) for r in rows)} != {sorted(self.appended)}")
        dead = sorted(r["offset"] for r in self.catalog.load_table(DLQ).scan().to_arrow().to_pylist())
        if dead != sorted(self.bad_offsets):
            found.append(f"dead letters at {dead}, expected {sorted(self.bad_offsets)}")
        found += [f"referenced file missing: {uri}" for uri in self.missing_referenced_files()]
        committed = Assembly(self.config, owner_id="look").checkpoints.load_committed_offsets(TOPIC)
        if committed.offset(0) != self.next_offset - 1:
            found.append(f"offset {committed.offset(0)}, expected {self.next_offset - 1} (stuck?)")
        return found
