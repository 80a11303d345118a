"""The Spark job: a run plan in, Iceberg-ready Parquet files and a run result out.

`run_job(spark, plan_uri)` is the whole job against an existing SparkSession (the EMR entry point
`spark_app/main.py` and the local runner both call it): the run driver
(`kafscale_iceberg/execution/driver.run_plan`: read and check the plan, cut it into tasks, the
observation stage of an inferred table, fold the task reports into the result) with Spark mapping the
tasks (`SparkTaskExecutor`). The in-process runner runs the same driver and tasks without Spark.

The tasks run through `RDD.mapPartitions`, one Spark partition per task, not `DataFrame.mapInArrow`:
the only data crossing Spark is one task id in and one small JSON report out per task, and PySpark
4.0's `mapInArrow` requires pandas (it is built on the pandas-UDF machinery), ~60 MB more in the EMR
environment for nothing.

Spark's own Parquet writer is not used: it names files with a per-job UUID (a retried run would add
files instead of replacing them) and moves partition columns out of the files into directory names
(pyiceberg's `add_files` needs them inside to infer each file's partition).
"""

from __future__ import annotations

import gc
import os
import sys
import zipimport
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.confluent_registry import RegistryCredentials
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.runs import RunResult
from kafscale_iceberg.execution.driver import (
    ObservationRunner,
    TaskRunner,
    TaskSizing,
    run_plan,
    with_written_columns,
)
from kafscale_iceberg.ports import TaskWork

__all__ = [
    "SPARK_CONF",
    "ObservationRunner",
    "SparkTaskExecutor",
    "TaskRunner",
    "TaskSizing",
    "build_session",
    "run_job",
    "with_written_columns",
]

SPARK_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.ui.showConsoleProgress": "false",
}
"""Settings the job relies on; `build_session` applies them, a caller's own session should too."""


def build_session(
    *, master: str | None = None, app_name: str = "kafscale-iceberg", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession with `SPARK_CONF` (plus `conf`); `master` None leaves it to spark-submit / EMR.

    With a `local` master and no `PYSPARK_PYTHON` in the environment, the Python workers run this
    interpreter (the one with the package installed), not whatever `python3` is first on PATH.
    """
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
        if master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
            # PySpark reads the workers' interpreter from the environment when the context starts.
            os.environ["PYSPARK_PYTHON"] = sys.executable
    for key, value in {**SPARK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@dataclass(frozen=True)
class _InSparkWorker:
    """A task function as a Spark Python worker runs it: the worker prepared first (`prepare_worker`)."""

    work: TaskWork

    def __call__(self, task_indexes: Iterable[int]) -> Iterator[str]:
        prepare_worker()
        return self.work(task_indexes)


class SparkTaskExecutor:
    """Maps a run's tasks as Spark tasks: one Spark partition per task (`RDD.mapPartitions`)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark

    @property
    def parallelism(self) -> int:
        """Spark's default parallelism (its cores)."""
        return int(self._spark.sparkContext.defaultParallelism)

    def map_tasks(self, work: TaskWork, count: int) -> list[str]:
        """Every task's document, collected to the driver."""
        rdd = self._spark.sparkContext.parallelize(range(count), count)
        return list(rdd.mapPartitions(_InSparkWorker(work)).collect())


class _StaticZipImporter(zipimport.zipimporter):
    """A zipimporter whose archive does not change while the Python worker lives."""

    def invalidate_caches(self) -> None:
        """Keep the directory read at creation (see `keep_zip_directories`)."""


def prepare_worker() -> None:
    """Cut PySpark's fixed cost per Python task in a reused worker (about 250 ms -> 40 ms here).

    Before every task the worker re-reads its zip archives' directories (`keep_zip_directories`),
    and after every task it runs a full `gc.collect()` (~75 ms once pyarrow, numba and pydantic are
    loaded). Freezing what is alive when a task starts - the imported modules and caches; the
    previous task's garbage was just collected - takes it out of those collections. Idempotent.
    """
    keep_zip_directories()
    gc.freeze()


def keep_zip_directories() -> None:
    """Stop this Python worker from re-reading pyspark.zip, py4j and Spark's jars before every task.

    PySpark's worker calls `importlib.invalidate_caches()` before each task; on Python 3.11 every
    zipimporter on `sys.path` (pyspark.zip, its sub-packages, py4j, spark-core's jar) then re-reads
    its archive's whole directory: ~200 ms per task, measured here, more than a small task's work.
    Those archives never change under a running worker, so their importers are swapped for ones
    that keep their directory. Idempotent; other importers are left alone.
    """
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            sys.path_importer_cache[path] = _StaticZipImporter(path)


def run_job(
    spark: SparkSession,
    plan_uri: str,
    *,
    s3: S3Settings | None = None,
    session_start_s: float = 0.0,
    sizing: TaskSizing | None = None,
    registry_credentials: RegistryCredentials | None = None,
) -> RunResult:
    """Run the plan at `plan_uri` with Spark; write the result to the plan's `result_uri` and return it.

    See `execution/driver.run_plan`: never raises for a failed run (the returned and written result
    says why); idempotent (rerunning a plan rewrites the same file names and the same result).
    """
    return run_plan(
        plan_uri,
        SparkTaskExecutor(spark),
        s3=s3,
        session_start_s=session_start_s,
        sizing=sizing,
        registry_credentials=registry_credentials,
    )
