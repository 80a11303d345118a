"""What to emit, computed from the domain objects: the `record_*` helpers every emitter calls.

The Lambda handlers (EMF) and the one-machine `run` (Prometheus) call the same helpers with the same
domain objects, so both report the same numbers the same way.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from kafscale_iceberg.domain.runner_choice import LAMBDA_KILL_CAUSES
from kafscale_iceberg.domain.runs import table_outputs
from kafscale_iceberg.exceptions import KafscaleIcebergError, RunSupersededError, SegmentIncompleteError
from kafscale_iceberg.metrics.definitions import (
    BATCHES,
    COLUMN_RECORDS,
    CONSECUTIVE_FAILURES,
    CONVERSION_FAILURES,
    DEAD_LETTERS,
    ERRORS,
    LAG_RECORDS,
    LAG_SECONDS,
    LAMBDA_RUNNER_KILLS,
    LAST_OFFSET,
    LAUNCHES,
    LFS_RESOLUTION_DURATION,
    LFS_RESOLUTION_ERRORS,
    LFS_RESOLVED,
    LFS_RESOLVED_BYTES,
    MAINTENANCE_FILES_COMPACTED,
    MAINTENANCE_ORPHANS_DELETED,
    MAINTENANCE_SNAPSHOTS_EXPIRED,
    NOTIFICATIONS_DEFERRED,
    NOTIFICATIONS_IGNORED,
    OFFSET_GAPS,
    OFFSET_RESETS,
    QUEUE_TO_START,
    RECONCILER_RELEASED_LEASES,
    RECONCILER_SIGNALS,
    RECORDS,
    REPLAY_SEGMENTS_ENQUEUED,
    RUN_DURATION,
    RUNS,
    TABLE_RECORDS,
    UPSERT_BYTES_LOCATED,
    UPSERT_BYTES_REWRITTEN,
    UPSERT_DELETE_FILES,
    UPSERT_FILES_REWRITTEN,
    UPSERT_ROWS,
    WATERMARK_AGE,
    WATERMARK_OFFSET,
    WATERMARK_TIMESTAMP,
    WORK_ITEMS,
    WRITE_LATENCY,
    ErrorStage,
    RecordResult,
    RunOutcomeLabel,
    Sample,
    error_stage,
    sample,
)

if TYPE_CHECKING:
    from kafscale_iceberg.domain.finished_runs import FinishedRun
    from kafscale_iceberg.domain.runs import RunPlan, RunResult
    from kafscale_iceberg.domain.upsert import UpsertCounts
    from kafscale_iceberg.ports import MetricsSink
    from kafscale_iceberg.services.commits.outcome import CommitOutcome
    from kafscale_iceberg.services.launch import LaunchOutcome
    from kafscale_iceberg.services.maintenance import MaintenanceReport
    from kafscale_iceberg.services.reconcile import ReconcileReport
    from kafscale_iceberg.services.replay import ReplayOutcome
    from kafscale_iceberg.services.route import RouteOutcome
    from kafscale_iceberg.services.status import StatusReport


def record_commit(
    sink: MetricsSink,
    plan: RunPlan,
    result: RunResult,
    outcome: CommitOutcome,
    *,
    started_at: float,
    ended_at: float,
) -> None:
    """Emit a finished commit step. `started_at`/`ended_at`: the commit step's wall clock (Unix s).

    The run counts as `committed` - records, segments, latencies - when this call moved something:
    the Iceberg commit, or the checkpoint write a crashed earlier attempt left undone. A commit step
    that found everything done already is `already_committed` and adds no records (a retried step
    after a success must not count them twice; one that crashed after writing both counts none).
    The offset gauges and `consecutive_failures` (0) are set either way.
    """
    if outcome.finished is not None:
        record_finished(sink, outcome.finished, ended_at=ended_at)
    newly = outcome.table_committed or bool(outcome.offsets_written)
    samples = _committed_samples(
        plan,
        result,
        newly=newly,
        offsets=outcome.offsets,
        upsert=outcome.upsert,
        upsert_table=outcome.upsert_table,
        commit_s=max(0.0, ended_at - started_at),
        ended_at=ended_at,
    )
    if newly and outcome.fill is not None:
        table = plan.anchor.identifier
        samples += [
            sample(COLUMN_RECORDS, count, topic=plan.topic, table=table, column=column)
            for column, count in outcome.fill.carried.items()
        ]
    sink.emit(samples)


def record_finished(sink: MetricsSink, finished: FinishedRun, *, ended_at: float) -> None:
    """Emit a run stranded between its tables' commits that a later run's commit finished (once: only
    the commit that finished it carries it, `CommitOutcome.finished` or `RunSupersededError.finished`)
    as a committed run: its records, dead letters, upsert rows, offsets."""
    if finished.plan is None or finished.result is None:
        return
    sink.emit(
        _committed_samples(
            finished.plan,
            finished.result,
            newly=True,
            offsets=finished.offsets,
            upsert=finished.upsert,
            upsert_table=finished.upsert_table,
            commit_s=0.0,
            ended_at=ended_at,
        )
    )


def _committed_samples(
    plan: RunPlan,
    result: RunResult,
    *,
    newly: bool,
    offsets: Mapping[int, int],
    upsert: UpsertCounts | None,
    upsert_table: str,
    commit_s: float,
    ended_at: float,
) -> list[Sample]:
    """`record_commit`'s samples of one run (see its docstring)."""
    topic = plan.topic
    label = RunOutcomeLabel.COMMITTED if newly else RunOutcomeLabel.ALREADY_COMMITTED
    samples = [sample(RUNS, 1, topic=topic, outcome=label), sample(CONSECUTIVE_FAILURES, 0, topic=topic)]
    if newly:
        quarantined = [q for p in result.partitions for q in p.quarantined]
        by_result = {
            RecordResult.WRITTEN: result.counts.written,
            RecordResult.DROPPED: 0,
            RecordResult.OVERLAPPED: result.counts.out_of_range,
            # A quarantined segment is one dead-letter row; every other dead-letter row is an invalid record.
            RecordResult.INVALID: max(0, result.counts.dead_lettered - len(quarantined)),
            RecordResult.QUARANTINED: sum(q.last_offset - q.base_offset + 1 for q in quarantined),
        }
        samples += [sample(RECORDS, count, topic=topic, result=r) for r, count in by_result.items()]
        samples += _lfs_samples(topic, result)
        samples.append(sample(BATCHES, plan.segment_count, topic=topic))
        for outcome_of in result.partitions:
            missing = sum(g.last - g.first + 1 for g in outcome_of.gaps)
            if missing:
                samples.append(sample(OFFSET_GAPS, missing, topic=topic, partition=outcome_of.partition))
        samples += [
            sample(CONVERSION_FAILURES, count, topic=topic, column=column)
            for column, count in result.counts.conversion_failures.items()
        ]
        samples += [
            sample(DEAD_LETTERS, count, topic=topic, reason=reason)
            for reason, count in result.counts.dead_letter_reasons.items()
        ]
        if plan.multi_table:  # one table and its dead letters: records_total says it all
            samples += [
                sample(TABLE_RECORDS, out.records, topic=topic, table=out.identifier, role=out.role.value)
                for out in table_outputs(plan, result)
                if out.records
            ]
        samples += _upsert_samples(topic, upsert, upsert_table)
        job_ms = max(0, result.timings.ended_at_ms - result.timings.started_at_ms)
        samples.append(sample(WRITE_LATENCY, job_ms + commit_s * 1000, topic=topic))
        run_s = max(0.0, ended_at - plan.created_at_ms / 1000)
        samples.append(sample(RUN_DURATION, run_s, topic=topic, outcome=RunOutcomeLabel.COMMITTED))
        queued = queue_to_start_seconds(plan, result)
        if queued is not None:
            samples.append(sample(QUEUE_TO_START, queued, topic=topic))
        newest = {o.partition: o.max_timestamp_ms for o in result.partitions}
        stamps = []
        for partition, stamp in sorted(newest.items()):
            if stamp is not None and partition in offsets:
                samples.append(sample(WATERMARK_TIMESTAMP, stamp, topic=topic, partition=partition))
                stamps.append(stamp)
        if stamps:
            samples.append(sample(WATERMARK_AGE, max(0.0, ended_at - min(stamps) / 1000), topic=topic))
    for partition, offset in sorted(offsets.items()):
        samples.append(sample(LAST_OFFSET, offset, topic=topic, partition=partition))
        samples.append(sample(WATERMARK_OFFSET, offset, topic=topic, partition=partition))
    return samples


def _upsert_samples(topic: str, counts: UpsertCounts | None, table: str) -> list[Sample]:
    """What an upsert run did to its table (none for an append run, or a commit found in already)."""
    if counts is None:
        return []
    return [
        sample(UPSERT_ROWS, counts.inserted, topic=topic, table=table, change="inserted"),
        sample(UPSERT_ROWS, counts.updated, topic=topic, table=table, change="updated"),
        sample(UPSERT_ROWS, counts.deleted, topic=topic, table=table, change="deleted"),
        sample(UPSERT_FILES_REWRITTEN, counts.files_rewritten, topic=topic, table=table),
        sample(UPSERT_BYTES_REWRITTEN, counts.bytes_rewritten, topic=topic, table=table),
        sample(UPSERT_DELETE_FILES, counts.delete_files, topic=topic, table=table),
        sample(UPSERT_BYTES_LOCATED, counts.bytes_located, topic=topic, table=table),
    ]


def _lfs_samples(topic: str, result: RunResult) -> list[Sample]:
    """`records_total{skipped_lfs}` and the LFS metrics, only for runs that met LFS envelopes.

    The duration histogram travels in the result as counts and sums per bucket: Prometheus observes
    each blob once at its bucket's mean (exact bucket counts and sum, without one number per blob in
    the result); EMF gets one value per bucket (a Lambda's log must not carry a line per blob).
    """
    counts, lfs = result.counts, result.counts.lfs
    if not (counts.skipped_lfs or lfs.resolved or lfs.errors):
        return []
    samples = [
        sample(RECORDS, counts.skipped_lfs, topic=topic, result=RecordResult.SKIPPED_LFS),
        sample(LFS_RESOLVED, lfs.resolved, topic=topic),
        sample(LFS_RESOLVED_BYTES, lfs.resolved_bytes, topic=topic),
    ]
    samples += [
        sample(LFS_RESOLUTION_ERRORS, count, topic=topic, reason=reason)
        for reason, count in sorted(lfs.errors.items())
    ]
    for count, total in zip(lfs.duration_counts, lfs.duration_sums, strict=False):
        if count:
            samples.append(Sample(LFS_RESOLUTION_DURATION, total / count, {"topic": topic}, count=int(count)))
    return samples


def queue_to_start_seconds(plan: RunPlan, result: RunResult) -> float | None:
    """Seconds from the oldest planned segment's S3 LastModified to the job's start (never below 0:
    S3's and the job's clocks may disagree by a little); None for a plan without LastModified."""
    landed = [
        s.last_modified_ms for p in plan.partitions for s in p.segments if s.last_modified_ms is not None
    ]
    if not landed:
        return None
    return max(0.0, (result.timings.started_at_ms - min(landed)) / 1000)


def record_abort(
    sink: MetricsSink,
    topic: str,
    consecutive_failures: int,
    *,
    run_started_at: float | None = None,
    ended_at: float | None = None,
    lambda_killed: str | None = None,
) -> None:
    """Emit an aborted run: `runs_total{aborted}`, `errors_total{job}`, the consecutive-failure gauge,
    the run's duration when `run_started_at` (Unix s; the lease claim, `grant.claimed_at_ms / 1000`)
    is given (`ended_at` defaults to now), and `lambda_runner_kills_total{cause}` when Lambda killed
    the run's Lambda runner (`lambda_killed`, `AbortResult.lambda_killed`)."""
    samples = [
        sample(RUNS, 1, topic=topic, outcome=RunOutcomeLabel.ABORTED),
        sample(ERRORS, 1, stage=ErrorStage.JOB),
        sample(CONSECUTIVE_FAILURES, consecutive_failures, topic=topic),
    ]
    if lambda_killed is not None:
        cause = LAMBDA_KILL_CAUSES.get(lambda_killed, "other")
        samples.append(sample(LAMBDA_RUNNER_KILLS, 1, topic=topic, cause=cause))
    if run_started_at is not None:
        end = time.time() if ended_at is None else ended_at
        samples.append(
            sample(RUN_DURATION, max(0.0, end - run_started_at), topic=topic, outcome=RunOutcomeLabel.ABORTED)
        )
    sink.emit(samples)


def record_launch(sink: MetricsSink, outcome: LaunchOutcome) -> None:
    """Emit a launcher decision: `launches_total{status}`, and `runs_total{started}` for a started run."""
    samples = [sample(LAUNCHES, 1, topic=outcome.topic, status=outcome.status.value)]
    if outcome.status.value == RunOutcomeLabel.STARTED.value:
        samples.append(sample(RUNS, 1, topic=outcome.topic, outcome=RunOutcomeLabel.STARTED))
    sink.emit(samples)


def record_route(sink: MetricsSink, outcome: RouteOutcome) -> None:
    """Emit what one routed message gave: work items by topic, ignored objects by reason."""
    items = Counter(item.topic for item in outcome.items)
    samples = [sample(WORK_ITEMS, count, topic=topic) for topic, count in sorted(items.items())]
    samples += [
        sample(NOTIFICATIONS_IGNORED, count, reason=reason)
        for reason, count in sorted(outcome.ignored.items())
    ]
    sink.emit(samples)


def record_route_failure(sink: MetricsSink, error: KafscaleIcebergError) -> None:
    """Emit a message the router could not route: `errors_total{route}`, except a `.kfs` whose `.index`
    has not landed yet - the normal race of a segment upload, retried - which is
    `notifications_deferred_total`, so an alarm on route errors does not fire on it."""
    if isinstance(error, SegmentIncompleteError):
        sink.emit([sample(NOTIFICATIONS_DEFERRED, 1)])
    else:
        record_error(sink, error_stage(error, default=ErrorStage.ROUTE))


def record_commit_failure(sink: MetricsSink, error: KafscaleIcebergError) -> None:
    """Emit a failed commit step (the Lambda's and the one-machine loop's): `errors_total{checkpoint}`
    for a checkpoint-store error (lease lost, store down), else `errors_total{sink}` (Iceberg, as the
    Go processor names its write stage) - `error_stage` with `sink` as the default. A run superseded
    by the stranded run its commit finished (`RunSupersededError`) is no error: the finished run is
    counted (`record_finished`)."""
    if isinstance(error, RunSupersededError):
        record_finished(sink, error.finished, ended_at=time.time())
        return
    record_error(sink, error_stage(error, default=ErrorStage.SINK))


def record_error(sink: MetricsSink, stage: ErrorStage | str) -> None:
    """Emit one `errors_total{stage}`; `stage` must be an `ErrorStage` value."""
    sink.emit([sample(ERRORS, 1, stage=ErrorStage(stage))])


def record_status(sink: MetricsSink, report: StatusReport) -> None:
    """Set the gauges a status report knows: lag, committed offsets, newest committed record
    timestamp, consecutive failures (what `run` emits on each poll, and after a restart)."""
    sink.emit(list(_status_samples(report)))


def _status_samples(report: StatusReport) -> Iterator[Sample]:
    for topic in report.topics:
        yield sample(CONSECUTIVE_FAILURES, topic.consecutive_failures, topic=topic.topic)
        for p in topic.partitions:
            yield sample(LAG_RECORDS, p.lag_records, topic=topic.topic, partition=p.partition)
            yield sample(LAG_SECONDS, p.lag_seconds, topic=topic.topic, partition=p.partition)
            if p.committed_offset >= 0:
                yield sample(LAST_OFFSET, p.committed_offset, topic=topic.topic, partition=p.partition)
                yield sample(WATERMARK_OFFSET, p.committed_offset, topic=topic.topic, partition=p.partition)
            if p.last_record_timestamp_ms:
                yield sample(
                    WATERMARK_TIMESTAMP, p.last_record_timestamp_ms, topic=topic.topic, partition=p.partition
                )


def record_reconcile(sink: MetricsSink, report: ReconcileReport) -> None:
    """Emit one reconciler pass: the topics it signalled and the leases of ended runs it released."""
    released = sum(1 for check in report.checks if check.released_lease_of)
    sink.emit(
        [sample(RECONCILER_SIGNALS, len(report.signalled)), sample(RECONCILER_RELEASED_LEASES, released)]
    )


def record_replay(sink: MetricsSink, topic: str, outcome: ReplayOutcome) -> None:
    """Emit a replay: the segments it re-enqueued, and the offset reset when it did one."""
    samples = [sample(REPLAY_SEGMENTS_ENQUEUED, outcome.enqueued, topic=topic)]
    if outcome.reset_done:
        samples.append(sample(OFFSET_RESETS, 1, topic=topic))
    sink.emit(samples)


def maintenance_totals(report: MaintenanceReport) -> tuple[int, int, int]:
    """(files compacted by committed compactions, snapshots expired, orphan files deleted) over the
    report's tables."""
    tables = report.tables
    compacted = sum(t.compaction.files_removed for t in tables if t.compaction and t.compaction.committed)
    expired = sum(len(t.expiry.expired) for t in tables if t.expiry)
    return compacted, expired, sum(t.orphans_deleted for t in tables)


def record_maintenance(sink: MetricsSink, report: MaintenanceReport) -> None:
    """Emit one maintenance pass: `maintenance_totals` as the three maintenance counters."""
    compacted, expired, orphans = maintenance_totals(report)
    sink.emit(
        [
            sample(MAINTENANCE_FILES_COMPACTED, compacted),
            sample(MAINTENANCE_SNAPSHOTS_EXPIRED, expired),
            sample(MAINTENANCE_ORPHANS_DELETED, orphans),
        ]
    )
