"""Compaction as Spark work through the job runner (EMR Serverless on AWS, local Spark on one machine).

`SparkCompaction.compact` is a maintenance pass's compaction step for one table when
`maintenance.compaction_engine` is `spark`:

1. **Finish** the job the table waits for (`{runs.location}/maintenance/{table}/pending.json`): still
   running - nothing else this pass; succeeded - its result is checked against its job and
   committed optimistically with the adapter's re-check (`commit_compaction_job`); failed, cancelled
   or unknown to the runner - dropped (its files are orphans for the cleanup).
2. Otherwise, when the table has `maintenance.compaction_min_small_files` small files (or always
   when forced), **plan** on the current snapshot, write the job document and **start** the job
   (`start_compaction`: the same runner, application, role and Python environment as the runs).
3. **Wait** up to `maintenance.compaction_wait_seconds` for it and finish it in the same pass; a job
   still running then is finished by a later pass (scheduled or triggered).

It takes no lease: a run's commit and the compaction's both land (the commit re-checks and retries
on the new snapshot), and no row is changed; a job whose files left the table meanwhile is abandoned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafscale_iceberg.config import KafscaleConfig, MappingConfig
from kafscale_iceberg.domain.compaction_jobs import (
    JOB_NAME,
    RESULT_NAME,
    CompactionJob,
    CompactionJobResult,
    PendingCompaction,
    job_document_uri,
    pending_uri,
)
from kafscale_iceberg.domain.jobs import JobState, JobStatus
from kafscale_iceberg.domain.maintenance import CompactionOutcome, TableHealth
from kafscale_iceberg.exceptions import KafscaleIcebergError, TransientError
from kafscale_iceberg.ports import CompactionJobRunner, CompactionJobTables, JobDocuments

logger = logging.getLogger(__name__)


class SparkCompaction:
    """A table's compaction as a Spark job (see the module docstring)."""

    def __init__(
        self,
        config: KafscaleConfig,
        tables: CompactionJobTables,
        runner: CompactionJobRunner,
        documents: JobDocuments,
        *,
        new_job_id: Callable[[], str],
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        poll_seconds: float = 2.0,
    ) -> None:
        self._config = config
        self._tables = tables
        self._runner = runner
        self._documents = documents
        self._new_job_id = new_job_id
        self._clock = clock
        self._sleep = sleep
        self._poll_seconds = poll_seconds

    def compact(
        self,
        mapping: MappingConfig,
        table: str,
        *,
        data_prefix: str,
        health: TableHealth,
        dry_run: bool,
        force: bool,
    ) -> tuple[CompactionOutcome | None, int]:
        """One pass's compaction of `table`: `(outcome or None, files planned)` (see the module docstring)."""
        settings = self._config.maintenance
        pending = self.pending(table)
        if pending is not None:  # one job per table at a time; a pass finishes it, or waits
            return (None if dry_run else self.finish(table, pending)), 0
        if not settings.compaction_due(health, force=force):
            return None, 0
        plan = self._tables.plan_compaction(
            table,
            small_file_bytes=settings.small_file_bytes,
            min_small_files=2 if force else settings.compaction_min_small_files,
            max_bytes=settings.compaction_max_bytes,
            # Position deletes folded as the inline engine does: the job reads through the table
            # (deletes applied); its result is checked against the rows left once they are.
            folding=settings.delete_folding(),
        )
        candidates = int(plan.file_count)
        if not candidates or dry_run:
            return None, candidates
        pending = self.launch(
            table, plan, data_prefix=data_prefix, target=self._config.target_file_size_for(mapping)
        )
        if not self._final_after_wait(pending, settings.compaction_wait_seconds):
            logger.info(
                "compaction job still running; a later pass commits it",
                extra={"table": table, "job_id": pending.job_id},
            )
            return None, candidates
        return self.finish(table, pending), candidates

    def pending(self, table: str) -> PendingCompaction | None:
        """The compaction job `table` waits for, None when none."""
        uri = pending_uri(self._config.runs.location, table)
        if not self._documents.exists(uri):
            return None
        pending = PendingCompaction.model_validate_json(self._documents.read_text(uri))
        return None if pending.done else pending

    def launch(self, table: str, plan: Any, *, data_prefix: str, target: int) -> PendingCompaction:
        """Write the job document of `plan`, start the job, record it as pending."""
        job_id = self._new_job_id()
        location = self._config.runs.location
        job_uri = job_document_uri(location, table, job_id, JOB_NAME)
        job = self._tables.compaction_job(
            plan,
            job_id=job_id,
            data_prefix=data_prefix,
            target_file_size_bytes=target,
            result_uri=job_document_uri(location, table, job_id, RESULT_NAME),
            started_ms=self._now_ms(),
        )
        self._documents.write_text(job_uri, job.model_dump_json(indent=2))
        runner_job_id = self._runner.start_compaction(job, job_uri)
        pending = PendingCompaction(
            job_id=job_id, job_uri=job_uri, runner_job_id=runner_job_id, started_ms=job.started_ms
        )
        self._documents.write_text(pending_uri(location, table), pending.model_dump_json())
        logger.info(
            "compaction job started",
            extra={"table": table, "job_id": job_id, "files": job.file_count, "runner_job_id": runner_job_id},
        )
        return pending

    def finish(self, table: str, pending: PendingCompaction) -> CompactionOutcome | None:
        """Commit (or drop) the pending job once it ended; None while it runs."""
        status = self._status(pending)
        if status is not None and not status.state.is_final:
            return None
        job = CompactionJob.model_validate_json(self._documents.read_text(pending.job_uri))
        outcome = CompactionOutcome(table=table, committed=False)
        if status is not None and status.state is JobState.SUCCEEDED:
            result = CompactionJobResult.model_validate_json(self._documents.read_text(job.result_uri))
            try:
                outcome = self._tables.commit_compaction_job(job, result, now_ms=self._now_ms())
            except TransientError:
                raise  # the job stays pending: the next pass commits it
            except KafscaleIcebergError as exc:
                logger.error("compaction job not committed", extra={"table": table, "problem": str(exc)})
        else:
            logger.warning(
                "compaction job ended without a result to commit; its files are orphans",
                extra={
                    "table": table,
                    "job_id": pending.job_id,
                    "state": status.runner_state if status else "unknown to the runner",
                    "detail": status.detail if status else "",
                },
            )
        done = pending.model_copy(update={"done": True})
        self._documents.write_text(pending_uri(self._config.runs.location, table), done.model_dump_json())
        return outcome

    def _final_after_wait(self, pending: PendingCompaction, wait_s: float) -> bool:
        deadline = self._clock() + wait_s
        while True:
            status = self._status(pending)
            if status is None or status.state.is_final:
                return True
            if self._clock() >= deadline:
                return False
            self._sleep(self._poll_seconds)

    def _status(self, pending: PendingCompaction) -> JobStatus | None:
        """The job's status; None when the runner does not know it (a local runner restarted)."""
        try:
            return self._runner.status(pending.runner_job_id)
        except TransientError:
            raise
        except KafscaleIcebergError as exc:
            logger.warning("compaction job unknown to the runner", extra={"problem": str(exc)})
            return None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)
