"""The compaction job: a compaction job document in, new partition-pure files and a result out.

`run_compaction_job(spark, job_uri)` is the whole job against an existing SparkSession (the EMR
entry point `spark_app/main.py --compaction <uri>` and the local runner both call it). One Spark task
per group (one Iceberg partition's small files): it reads the files through the table metadata the
job was planned from (`adapters/iceberg_compaction_files.rewrite_job_group`, no catalog) and writes them
one Kafka partition per file, in offset order, at about the target size, under the job's folder.
The driver writes the result beside the job; the maintenance pass checks and commits it.

Never raises for a failed job: the result says why (and its files, if any, are orphans).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.compaction_jobs import CompactionGroupOutput, CompactionJob, CompactionJobResult
from kafscale_iceberg.exceptions import KafscaleIcebergError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)
_MAX_MESSAGE = 4000


@dataclass(frozen=True)
class GroupRewriter:
    """The function each Spark task runs: group indexes in, one JSON `CompactionGroupOutput` each."""

    job_json: str
    s3: S3Settings

    def __call__(self, indexes: Iterable[int]) -> Iterator[str]:
        from kafscale_iceberg.adapters.iceberg_compaction_files import rewrite_job_group  # noqa: PLC0415

        job = CompactionJob.model_validate_json(self.job_json)
        sink = StagedFileStore(self.s3)
        for index in indexes:
            yield rewrite_job_group(job, index, sink).model_dump_json()


def run_compaction_job(
    spark: SparkSession, job_uri: str, *, s3: S3Settings | None = None
) -> CompactionJobResult:
    """Run the compaction job at `job_uri`; write its result to the job's `result_uri` and return it.

    Idempotent: a rerun rewrites the same file names under the job's folder and the same result.
    """
    documents = DocumentStore(s3)
    try:
        job = CompactionJob.model_validate_json(documents.read_bytes(job_uri))
    except (KafscaleIcebergError, ValidationError, UnicodeDecodeError) as exc:
        logger.error("compaction job %s could not be read: %s", job_uri, exc)
        return CompactionJobResult(job_id="unknown", succeeded=False, failure=_describe(exc))
    logger.info(
        "compaction started: job=%s table=%s groups=%d files=%d",
        job.job_id,
        job.table,
        len(job.groups),
        job.file_count,
    )
    try:
        count = len(job.groups)
        rewriter = GroupRewriter(job.model_dump_json(), s3 or S3Settings())
        outputs = spark.sparkContext.parallelize(range(count), count).mapPartitions(rewriter).collect()
        groups = sorted(
            (CompactionGroupOutput.model_validate_json(o) for o in outputs), key=lambda o: o.index
        )
        result = CompactionJobResult(job_id=job.job_id, succeeded=True, groups=tuple(groups))
    except Exception as exc:  # the job boundary: any error becomes a written failure
        logger.exception("compaction failed: job=%s", job.job_id)
        result = CompactionJobResult(job_id=job.job_id, succeeded=False, failure=_describe(exc))
    documents.write_text(job.result_uri, result.model_dump_json(indent=2))
    logger.info(
        "compaction finished: job=%s succeeded=%s files=%d",
        job.job_id,
        result.succeeded,
        sum(len(g.files) for g in result.groups),
    )
    return result


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE // 2] + " ... " + text[-_MAX_MESSAGE // 2 :]
    return text
