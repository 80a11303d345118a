"""`kafscale-iceberg run` as a user runs it (a process of its own), and the demo.

Real parts: moto server (S3), a real etcd, a SQLite catalog with a file warehouse, and local Spark in
the `run` process (its own JVM: these tests pay a Spark start each). The config holds only `s3`,
`iceberg`, `etcd`, `offsets` and `mappings`: the one-machine defaults must do the rest.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.config import KafscaleConfig, load_config
from kafscale_iceberg.local.demo import run_demo
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.segments.layout import Codec
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

# Every test here runs the CLI in a process of its own (or the demo, on local Spark).
pytestmark = pytest.mark.slow

NAMESPACE = "prod"
TOPIC = "orders"


class Setup:
    """A bucket with segments, and a minimal config file pointing at it."""

    def __init__(self, moto: MotoEndpoint, etcd: EtcdServer, tmp_path: Path) -> None:
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        self.path = tmp_path / "config.yaml"
        self.path.write_text(
            yaml.safe_dump(
                local_document(
                    tmp_path,
                    moto,
                    bucket=self.bucket,
                    namespace=NAMESPACE,
                    etcd_url=etcd.url,
                    mappings=[{"topic": TOPIC, "table": "shop.orders", "create_table_if_missing": True}],
                )
            )
        )
        self.config: KafscaleConfig = load_config(self.path)

    def put(self, partition: int, base: int, count: int, **options: Any) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, partition, base, count, **options)

    def command(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "kafscale_iceberg.cli", "run", "--config", str(self.path), *extra]

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*extra), check=False, capture_output=True, text=True, timeout=300, env=_env()
        )

    def keys(self) -> list[tuple[int, int]]:
        table = load_iceberg_catalog(CatalogSettings.from_config(self.config)).load_table("shop.orders")
        rows = table.scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
        return sorted((r["partition"], r["offset"]) for r in rows)

    def snapshots(self) -> int:
        table = load_iceberg_catalog(CatalogSettings.from_config(self.config)).load_table("shop.orders")
        return len(table.snapshots())


def _env() -> dict[str, str]:
    """The command's environment as a user's shell gives it (no protobuf implementation chosen)."""
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", "KAFSCALE_METRICS_ADDR": "127.0.0.1:0"}


@pytest.fixture
def setup(moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path) -> Setup:
    return Setup(moto_server, etcd_server, tmp_path)


def test_run_once_commits_everything_and_is_idempotent(setup: Setup) -> None:
    setup.put(0, 0, 40, codec=Codec.SNAPPY)
    setup.put(1, 0, 30, codec=Codec.ZSTD)
    setup.put(1, 30, 30, codec=Codec.GZIP)
    first = setup.run("--once")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "1 run committed, 100 records" in first.stderr
    assert setup.keys() == [(0, o) for o in range(40)] + [(1, o) for o in range(60)]
    snapshots = setup.snapshots()

    second = setup.run("--once")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "0 runs committed" in second.stderr
    assert setup.snapshots() == snapshots


def test_run_once_fails_with_a_summary_naming_the_corrupt_segment(setup: Setup) -> None:
    setup.put(0, 0, 10)
    setup.put(0, 10, 10)
    key = format_segment_key(NAMESPACE, TOPIC, 0, 10)
    body = bytearray(setup.s3.get_object(Bucket=setup.bucket, Key=key)["Body"].read())
    body[-40] ^= 0x55  # a byte inside the last batch's records
    setup.s3.put_object(Bucket=setup.bucket, Key=key, Body=bytes(body))
    done = setup.run("--once")
    assert done.returncode == 1
    assert "orders: FAILED" in done.stderr
    assert "segment-00000000000000000010.kfs" in done.stderr


def test_a_bad_config_is_one_line_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("s3: {bucket: b}\noffsets: {backend: noop}\nmappings: []\n")
    done = subprocess.run(
        [sys.executable, "-m", "kafscale_iceberg.cli", "run", "--config", str(path), "--once"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert done.returncode == 1
    assert "offsets.backend" in done.stderr
    assert "Traceback" not in done.stderr


def test_strict_config_refuses_a_misspelled_key_at_start(tmp_path: Path) -> None:
    """Issue 12 §6: `create_tabel_if_missing` was only a warning (and the table was never created)."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "s3: {bucket: b}\noffsets: {backend: sqlite}\n"
        "mappings: [{topic: orders, table: lake.orders, create_tabel_if_missing: true}]\n"
    )
    command = [
        sys.executable,
        "-m",
        "kafscale_iceberg.cli",
        "status",
        "--config",
        str(path),
        "--strict-config",
    ]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 1
    assert "mappings[0].create_tabel_if_missing" in done.stderr
    assert "Traceback" not in done.stderr


def test_sigterm_mid_run_leaves_a_state_the_next_start_completes_exactly_once(setup: Setup) -> None:
    for base in range(0, 200, 50):
        setup.put(0, base, 50)
    process = subprocess.Popen(setup.command(), stderr=subprocess.PIPE, text=True, env=_env())
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        lines.append(line)
        if "started:" in line:  # a run was launched: its job is starting or running
            break
    else:
        process.kill()
        pytest.fail("no run started:\n" + "".join(lines))
    (port,) = [
        re.search(r"metrics on 127\.0\.0\.1:(\d+)/metrics", line).group(1)
        for line in lines
        if "metrics on" in line
    ]  # type: ignore[union-attr]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        assert response.read() == b"ok"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert b"kafscale_processor_lag_records" in response.read()
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=120)
    output = "".join(lines) + rest
    assert process.returncode == 0, output[-3000:]
    assert "stopped cleanly" in output
    store_checkpoints = _store(setup)
    assert store_checkpoints.read_lease_holder(TOPIC) is None  # released, not left to expire

    done = setup.run("--once")
    assert done.returncode == 0, done.stderr[-3000:]
    assert setup.keys() == [(0, o) for o in range(200)]


def _store(setup: Setup) -> Any:
    from kafscale_iceberg.assembly import Assembly

    return Assembly(setup.config).checkpoints


def test_the_demo_passes_its_own_checks(tmp_path: Path, spark: SparkSession) -> None:
    out = io.StringIO()
    code = run_demo(tmp_path / "demo", rounds=3, interval_s=0.3, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "FAILED" not in text
    assert "present exactly once" in text
    assert "replaying a committed range wrote no snapshot" in text
    assert "payments: every record once across the routed tables" in text
    assert "clicks: the columns were inferred from the records" in text
    assert "pizzas: the table's columns are the schema's" in text
    assert (tmp_path / "demo" / "config.yaml").exists()


def test_run_exits_on_an_error_a_person_must_fix_instead_of_staying_up_not_ready(
    setup: Setup, etcd_server: EtcdServer
) -> None:
    """Issue 12 §2: only a dependency's outage is ridden out. A value under our etcd keys that this
    product never writes (edited by hand, or another writer under the prefix) is terminal: `run` used
    to treat it as an outage and stay up not ready forever; now it exits 1 naming the key and what to
    do, without a traceback (a defect would print one)."""
    import etcd3

    setup.put(0, 0, 5)
    key = f"{setup.config.offsets.key_prefix}/offsets/{TOPIC}/0"
    host, port = etcd_server.url.removeprefix("http://").rsplit(":", 1)
    client = etcd3.client(host=host, port=int(port))
    try:
        client.put(key, "edited by hand")
    finally:
        client.close()

    process = subprocess.Popen(
        setup.command(), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _, stderr = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"run stayed up on a terminal error: {stderr[-2000:]}")
    assert process.returncode == 1, stderr[-3000:]
    assert key in stderr
    assert "fix or delete the value" in stderr
    assert "Traceback" not in stderr
