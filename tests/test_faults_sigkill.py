"""A real SIGKILL of the process at the exact point of issue 12 §1: after the Iceberg commit landed,
before the offset write (real etcd, moto server, SQLite catalog, local Spark in the child process).

The child builds the product's pipeline from the config and wraps the real checkpoint store so that
`commit_offsets` SIGKILLs its own process before writing: nothing runs after it (no `finally`, no
lease release), as when the kernel kills a runner. A new `run --once` then starts with more segments.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from kafscale_iceberg.assembly import Assembly
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.test_faults import TABLE, TOPIC, World

pytestmark = pytest.mark.slow

CHILD = """
import os, signal, sys
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import load_config_from
from kafscale_iceberg.local.pipeline import Pipeline
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner

class KilledBeforeOffsets:
    def __init__(self, inner):
        self._inner = inner
    def __getattr__(self, name):
        return getattr(self._inner, name)
    def commit_offsets(self, grant, updates):
        os.kill(os.getpid(), signal.SIGKILL)

assembly = Assembly(load_config_from(sys.argv[1]), owner_id="doomed")
assembly.__dict__["checkpoints"] = KilledBeforeOffsets(assembly.checkpoints)
runner = LocalSparkJobRunner(master="local[1]", s3=assembly.s3_settings)
Pipeline(assembly, runner, watch_interval_s=0.1).run_once()
print("not killed", flush=True)
"""


def test_sigkill_between_the_table_commit_and_the_offset_write_heals_with_new_segments(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, spark: SparkSession
) -> None:
    # The world's lease TTL is long, so no step between two renewals outlasts it on a loaded
    # machine; the killed child's lease is expired by the test (`expire_dead_lease`), as etcd would
    # once the TTL passed, instead of waited for.
    world = World(moto_server, tmp_path, etcd_url=etcd_server.url)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(world.config.model_dump(mode="json", by_alias=True, exclude_unset=True)))
    world.put(0, 12)
    world.put(1, 6)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == -9, child.stderr[-3000:]
    look = Assembly(world.config, owner_id="look")
    assert look.commits.reconciled_offsets(TOPIC, TABLE).store_behind  # the table has it, etcd not
    world.expire_dead_lease()
    world.put(0, 4)
    world.put(1, 3)
    summary = world.process().run_once()
    assert summary.ok, summary.failed
    world.check_exactly_once()
