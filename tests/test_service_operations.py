"""Issue 35: the operations docs/operations.md prescribes for one machine run as a service, done as it
says: back up the SQLite state (while `run` is up, or stopped), restore it, and the run continues
exactly once; and the step-by-step migration from KafScale's Go processor: its offsets in etcd, its
table, its lease -> this product takes over with no gap and no duplicate.

Real parts: moto server (S3), a real etcd (etcdctl as the docs use it), the SQLite catalog and offset
store, the `sqlite3` command line for the backups, the inline runner (no JVM), `open_pipeline` as `run`
opens it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.local.wiring import open_pipeline
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

NAMESPACE = "prod"
TOPIC = "orders"
TABLE = "shop.orders"
INLINE = {"type": "inline", "inline": {"workers": 2}}


class Deployment:
    """One machine's config over a bucket; runs as `run --once` does (one pipeline per call)."""

    def __init__(self, root: Path, moto: MotoEndpoint, *, etcd: EtcdServer | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        document = local_document(
            root,
            moto,
            bucket=self.bucket,
            namespace=NAMESPACE,
            etcd_url=etcd.url if etcd is not None else None,
            mappings=[{"topic": TOPIC, "table": TABLE, "create_table_if_missing": True}],
            runner=INLINE,
        )
        (root / "config.yaml").write_text(yaml.safe_dump(document))
        self.document = document
        self.config: KafscaleConfig = config_from_mapping(document, source=str(root / "config.yaml"))

    def put(self, partition: int, base: int, count: int) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, partition, base, count)

    def run_once(self, **options: Any) -> Any:
        with open_pipeline(self.config, observers=[]) as pipeline:
            return pipeline.run_once(**options)

    def rows(self) -> Counter[tuple[int, int]]:
        table = load_iceberg_catalog(CatalogSettings.from_config(self.config)).load_table(TABLE)
        rows = table.scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
        return Counter((r["partition"], r["offset"]) for r in rows)

    def state_files(self) -> dict[str, Path]:
        """The SQLite files docs/operations.md backs up: the offsets, then the catalog."""
        catalog = self.config.iceberg.catalog.uri.removeprefix("sqlite:///")
        return {"offsets": Path(self.config.offsets.sqlite_path), "catalog": Path(catalog)}


def _exactly(ranges: dict[int, int]) -> Counter[tuple[int, int]]:
    return Counter((p, o) for p, end in ranges.items() for o in range(end))


def _sqlite_backup(source: Path, target: Path) -> None:
    """The documented command: sqlite3's online backup (a consistent copy while writers run)."""
    done = subprocess.run(
        ["sqlite3", str(source), f".backup '{target}'"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


pytestmark = pytest.mark.slow  # `kafscale-iceberg run` and sqlite3 backups as processes


@pytest.fixture
def deployment(moto_server: MotoEndpoint, tmp_path: Path) -> Deployment:
    return Deployment(tmp_path / "state", moto_server)


def test_a_backup_taken_while_running_restores_and_the_run_continues_exactly_once(
    deployment: Deployment, tmp_path: Path
) -> None:
    deployment.put(0, 0, 20)
    deployment.put(1, 0, 10)
    assert deployment.run_once().ok
    deployment.put(0, 20, 20)
    backups = tmp_path / "backup"
    backups.mkdir()

    # A run commits while the backup is taken: offsets first, then the catalog (the documented order).
    files = deployment.state_files()
    outcomes: list[Any] = []
    running = threading.Thread(target=lambda: outcomes.append(deployment.run_once()))
    running.start()
    for path in files.values():
        _sqlite_backup(path, backups / path.name)
    running.join(timeout=300)
    assert not running.is_alive()
    assert [summary.ok for summary in outcomes] == [True]

    deployment.put(1, 10, 20)
    assert deployment.run_once().ok
    assert deployment.rows() == _exactly({0: 40, 1: 30})

    # The machine is lost with its state; S3 (segments, data files) is not. Restore, run again.
    for path in files.values():
        path.unlink()
        shutil.copy(backups / path.name, path)
    restored = deployment.rows()
    assert restored <= _exactly({0: 40, 1: 10})  # the backup predates partition 1's second segment
    assert deployment.run_once().ok
    assert deployment.rows() == _exactly({0: 40, 1: 30})


def test_a_backup_with_a_commit_between_its_two_files_restores_exactly(
    deployment: Deployment, tmp_path: Path
) -> None:
    """The offsets copy older than the catalog's (a commit landed between the two): the table's record of
    its offsets wins, and the restored store is brought up to it."""
    deployment.put(0, 0, 10)
    assert deployment.run_once().ok
    files = deployment.state_files()
    _sqlite_backup(files["offsets"], tmp_path / "offsets.bak")
    deployment.put(0, 10, 10)
    assert deployment.run_once().ok
    _sqlite_backup(files["catalog"], tmp_path / "catalog.bak")  # stopped: the same command
    deployment.put(0, 20, 10)
    assert deployment.run_once().ok

    shutil.copy(tmp_path / "offsets.bak", files["offsets"])
    shutil.copy(tmp_path / "catalog.bak", files["catalog"])
    summary = deployment.run_once()
    assert summary.ok
    assert deployment.rows() == _exactly({0: 30})


# -- migration from the Go processor --------------------------------------------------------------


def _go_table(deployment: Deployment, upto: dict[int, int]) -> None:
    """The table as KafScale's Go processor leaves it: its base columns (record_id, topic, partition,
    offset, timestamp_ms, key, value, headers), rows up to its offsets, no `kafscale.*` summary keys."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, IntegerType, LongType, NestedField, StringType

    catalog = load_iceberg_catalog(CatalogSettings.from_config(deployment.config))
    catalog.create_namespace_if_not_exists("shop")
    schema = Schema(
        NestedField(1, "record_id", StringType(), required=True),
        NestedField(2, "topic", StringType(), required=True),
        NestedField(3, "partition", IntegerType(), required=True),
        NestedField(4, "offset", LongType(), required=True),
        NestedField(5, "timestamp_ms", LongType(), required=True),
        NestedField(6, "key", BinaryType(), required=False),
        NestedField(7, "value", BinaryType(), required=False),
        NestedField(8, "headers", StringType(), required=False),
    )
    table = catalog.create_table(TABLE, schema=schema)
    rows = [(p, o) for p, last in upto.items() for o in range(last + 1)]
    table.append(
        pa.table(
            {
                "record_id": [f"{TOPIC}:{p}:{o}" for p, o in rows],
                "topic": [TOPIC] * len(rows),
                "partition": pa.array([p for p, _ in rows], pa.int32()),
                "offset": pa.array([o for _, o in rows], pa.int64()),
                "timestamp_ms": pa.array([1_700_000_000_000 + o for _, o in rows], pa.int64()),
                "key": pa.array([None] * len(rows), pa.binary()),
                "value": pa.array([b"{}"] * len(rows), pa.binary()),
                "headers": [""] * len(rows),
            },
            schema=schema.as_arrow(),
        )
    )


def _go_offsets(etcd: EtcdServer, prefix: str, upto: dict[int, int]) -> None:
    """`CommitOffset` of the Go processor: last processed offset (inclusive), compact Go JSON."""
    for partition, last in upto.items():
        value = json.dumps(
            {"offset": last, "last_timestamp_ms": 1_700_000_000_000, "updated_at": 1_700_000_000_000},
            separators=(",", ":"),
        )
        etcd.etcdctl("put", f"{prefix}/offsets/{TOPIC}/{partition}", value)
        etcd.etcdctl("put", f"{prefix}/watermarks/{TOPIC}/{partition}", value)


def test_migration_from_the_go_processor_takes_over_with_no_gap_and_no_duplicate(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    deployment = Deployment(tmp_path / "state", moto_server, etcd=etcd_server)
    prefix = deployment.document["offsets"]["key_prefix"]  # the Go processor's offsets.key_prefix
    deployment.put(0, 0, 30)
    deployment.put(1, 0, 20)
    go_done = {0: 14, 1: 9}
    _go_table(deployment, go_done)
    _go_offsets(etcd_server, prefix, go_done)
    # The Go processor is running: its partition lease is attached to an etcd lease it keeps alive.
    raw = etcd_server.raw_client()
    go_lease = raw.lease(300)
    raw.put(
        f"{prefix}/leases/{TOPIC}/0",
        b'{"owner_id":"iceberg-processor-0","lease_expires_at":1700000030000,"generation":1}',
        lease=go_lease,
    )

    # Step 1 (the docs' check before the switch): what the Go processor committed, as etcdctl shows it.
    shown = etcd_server.etcdctl("get", "--prefix", f"{prefix}/offsets/{TOPIC}/")
    assert '"offset":14' in shown
    assert '"offset":9' in shown

    config = str(deployment.root / "config.yaml")
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafscale_iceberg.cli",
            "status",
            "--config",
            config,
            "--strict-config",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert status.returncode == 0, status.stderr
    (topic,) = json.loads(status.stdout)["topics"]
    assert {p["partition"]: p["committed_offset"] for p in topic["partitions"]} == go_done
    assert topic["lease"]["go_processor_partition"] == 0

    # Started while the Go processor still runs: the topic is refused, nothing is written.
    before = deployment.rows()
    blocked = deployment.run_once(busy_wait_s=1)  # `run --once` waits twice the lease TTL
    assert not blocked.ok
    assert "busy for 1 s: KafScale Go processor 'iceberg-processor-0' on partition 0" in blocked.failed[TOPIC]
    assert deployment.rows() == before == _exactly({0: 15, 1: 10})

    # Step 2: stop the Go processor (its lease is revoked on shutdown, or expires after its TTL).
    go_lease.revoke()
    deadline = time.monotonic() + 120
    while etcd_server.etcdctl("get", "--prefix", "--keys-only", f"{prefix}/leases/{TOPIC}/").strip():
        assert time.monotonic() < deadline, "the Go lease key outlived its revoked lease"
        time.sleep(0.1)

    # Step 3: start this product on the same etcd prefix and table: it continues after the Go offsets.
    assert deployment.run_once().ok
    assert deployment.rows() == _exactly({0: 30, 1: 20})
    deployment.put(0, 30, 10)
    assert deployment.run_once().ok
    assert deployment.rows() == _exactly({0: 40, 1: 20})

    # The Go processor's offset keys moved on with the table (last offset, inclusive, in Go's JSON).
    lines = etcd_server.etcdctl("get", "--prefix", f"{prefix}/offsets/{TOPIC}/").splitlines()
    values = {
        int(key.rsplit("/", 1)[1]): json.loads(value)
        for key, value in zip(lines[::2], lines[1::2], strict=True)
    }
    assert {p: v["offset"] for p, v in values.items()} == {0: 39, 1: 19}
    assert all(list(v) == ["offset", "last_timestamp_ms", "updated_at"] for v in values.values())
