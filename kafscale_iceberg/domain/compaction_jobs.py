"""A compaction run as Spark work: the job document the maintenance pass writes, the result the job
writes beside it, and the pending record the next pass finishes it from.

The maintenance pass (`services/compaction_jobs.py`) plans a table's compaction and writes a
`CompactionJob` to `{runs.location}/maintenance/{table}/{job_id}/job.json`; the job runner (EMR
Serverless on AWS, local Spark on one machine) runs `spark_app/main.py --compaction <uri>`, which
rewrites each group's files partition-pure in offset order under `folder` and writes a
`CompactionJobResult` to `result_uri`. The pass (the same one waiting, or a later one) then checks
the result against the job and commits it optimistically with the adapter's re-check. Files of a job
that failed or was abandoned are under the product's data prefix: orphans for the cleanup.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kafscale_iceberg.domain.tickets import join_uri

MAINTENANCE_FOLDER = "maintenance"
JOB_NAME = "job.json"
RESULT_NAME = "result.json"
PENDING_NAME = "pending.json"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def compaction_folder(runs_location: str, table: str) -> str:
    """`{runs.location}/maintenance/{table}`: a table's compaction jobs and its pending record."""
    return join_uri(runs_location, MAINTENANCE_FOLDER, table)


def pending_uri(runs_location: str, table: str) -> str:
    """Where the compaction job a table waits for is recorded."""
    return join_uri(compaction_folder(runs_location, table), PENDING_NAME)


def job_document_uri(runs_location: str, table: str, job_id: str, name: str) -> str:
    """`{runs.location}/maintenance/{table}/{job_id}/{name}` (`job.json`, `result.json`)."""
    return join_uri(compaction_folder(runs_location, table), job_id, name)


class CompactionJobGroup(_Model):
    """Small files of one Iceberg partition that one Spark task rewrites together."""

    partition_key: str
    files: tuple[str, ...] = Field(min_length=1)
    rows: int = Field(ge=0)
    """Rows the files hold (their manifests' record counts)."""
    deleted_rows: int = Field(default=0, ge=0)
    """Of `rows`, those the snapshot's position deletes delete: the job's rewrite applies them (it
    reads through the table), so the result must hold exactly `rows - deleted_rows`."""
    bytes: int = Field(default=0, ge=0)
    """The files' bytes (their manifests' sizes): what sizes the job (0 in a job written before)."""


class CompactionJob(_Model):
    """One table's compaction as Spark work (the job document)."""

    version: Literal[1] = 1
    job_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    table: str
    metadata_location: str
    """The table metadata the job was planned from; the job reads the files through it."""
    snapshot_id: int | None
    groups: tuple[CompactionJobGroup, ...] = Field(min_length=1)
    folder: str
    """Where the new files go: a new folder under the table's run data prefix."""
    target_file_size_bytes: int = Field(gt=0)
    result_uri: str
    io_properties: dict[str, str] = Field(default_factory=dict)
    """FileIO settings to read the table with (endpoint, region, addressing; never credentials)."""
    started_ms: int = 0

    @property
    def file_count(self) -> int:
        return sum(len(g.files) for g in self.groups)

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)

    @property
    def total_bytes(self) -> int:
        """The bytes the job rewrites (0 when its document predates the count)."""
        return sum(g.bytes for g in self.groups)


class CompactionGroupOutput(_Model):
    """What the job wrote for one group."""

    index: int = Field(ge=0)
    files: tuple[str, ...]
    rows: int = Field(ge=0)


class CompactionJobResult(_Model):
    """The job's result document: every group's new files, or why it failed (then nothing is used)."""

    version: Literal[1] = 1
    job_id: str
    succeeded: bool
    groups: tuple[CompactionGroupOutput, ...] = ()
    failure: str | None = None


class PendingCompaction(_Model):
    """The compaction job a table waits for (`pending.json`)."""

    version: Literal[1] = 1
    job_id: str
    job_uri: str
    runner_job_id: str
    started_ms: int
    done: bool = False
    """Finished (committed, abandoned or failed): nothing is pending."""
