"""The steps around a running job: watch it (renewing the topic's lease), and abort a failed run.

In AWS these are Step Functions task states (definition in `infra/`); on one machine a loop calls
them. The state passed between steps is a `RunTicket`, JSON-serializable, so any process can pick
up a run where another left it.

- `start_job`: starts the Spark job, idempotently (the run id is EMR's `clientToken`).
- `prepare_job`: AWS's StartJob step: the lease renewed and the plan read; the state machine then
  starts the run's EMR job itself (`startJobRun.sync`, the one `StartJobRun` call) or invokes the
  Lambda runner (`RunTicket.runner`).
- `watch`: one look at the job and one lease renewal. A lost lease cancels the job: another run may
  already hold the topic, and this one must not commit. A ticket without a job id (AWS: the state
  machine started the job) is only renewed; the state machine stops its job.
- `commit_run`: reads the run's plan and result and hands them to the commit step (`CommitService`):
  one Iceberg snapshot per table, offsets, lease release. A failed result is refused (the run aborts).
- `run_to_end` (a function: no lease, no catalog): the Lambda runner's step, the run's tasks in this
  process until it ends.
- `abort`: cancels the run's job (a no-op for a finished one), records the run's outcome beside its
  plan (so the next plan of the same range uses the next attempt) with where the run wrote files,
  releases the lease if still ours, and says how long to wait before re-signalling the topic and
  whether the topic's consecutive failures reached the alarm threshold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafscale_iceberg.config import RunsConfig
from kafscale_iceberg.domain.commit_failures import decide_commit_failure
from kafscale_iceberg.domain.field_ids import TopicFieldIds
from kafscale_iceberg.domain.jobs import JobState, JobStatus
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runner_choice import RunnerLineup
from kafscale_iceberg.domain.runs import FailureKind, RunPlan, RunResult, TableRole
from kafscale_iceberg.domain.tickets import OUTCOME_NAME, FailedAttempt, RunTicket, run_document_uri
from kafscale_iceberg.exceptions import (
    DocumentMissingError,
    KafscaleIcebergError,
    LeaseLostError,
    OffsetsFencedError,
    RunNotCommittableError,
)
from kafscale_iceberg.ports import CheckpointStore, JobLookup, JobRunner, RunDocuments, WaitingJobRunner
from kafscale_iceberg.services.backoff import BackoffRecords
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.field_id_records import FieldIdRecords

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchResult:
    """One look at a running job: its state, and whether the lease was lost (the job was cancelled)."""

    status: JobStatus | None
    lease_lost: bool = False

    @property
    def is_final(self) -> bool:
        """True when the run should move to commit (succeeded) or abort (anything else final, or lost)."""
        return self.lease_lost or (self.status is not None and self.status.state.is_final)


@dataclass(frozen=True)
class CommittedRun:
    """A committed run: its plan and result, and what the commit step did (what metrics need)."""

    plan: RunPlan
    result: RunResult
    outcome: CommitOutcome


@dataclass(frozen=True)
class AbortResult:
    """What the abort step decided."""

    resignal_after_seconds: int
    consecutive_failures: int
    alarm: bool
    lease_released: bool
    lambda_killed: str | None = None
    """What Lambda killed the run's Lambda runner for ("timed out", "ran out of memory"): the topic's
    next runs go to EMR Serverless (`domain/runner_choice.py`); None otherwise."""


class RunSteps:
    """A launched run's steps: start its job, watch it, commit the run or abort it (see the module
    docstring).

    `commits` builds the commit service on first use (only the commit step loads the catalog, and
    with it pyiceberg and pyarrow). `runners`: the deployment's runner declarations, asked what the
    runner of an aborted run can do (its job found by run id, a kill by its platform); by default
    each kind's own.
    """

    def __init__(
        self,
        runs: RunsConfig,
        checkpoints: CheckpointStore,
        jobs: JobRunner,
        documents: RunDocuments,
        *,
        commits: Callable[[], CommitService] | None = None,
        mapping_policy: Callable[[str], TablePolicy] | None = None,
        clock: Callable[[], float] = time.time,
        runners: RunnerLineup | None = None,
    ) -> None:
        self._runs = runs
        self._runners = runners or RunnerLineup(())
        self._checkpoints = checkpoints
        self._jobs = jobs
        self._documents = documents
        self._commits = commits
        self._mapping_policy = mapping_policy
        self._clock = clock
        self._field_id_records = FieldIdRecords(documents, runs.location)

    def start_job(self, ticket: RunTicket) -> RunTicket:
        """Start the run's Spark job (idempotent: the run id is the job's client token).

        Renews the lease first, so a run whose lease lapsed before its job started never starts.
        """
        self._checkpoints.renew_lease(ticket.grant)
        plan = RunPlan.model_validate_json(self._documents.read_text(ticket.plan_uri))
        job_id = self._jobs.start(plan, ticket.plan_uri)
        logger.info("job started", extra={"topic": ticket.topic, "run_id": ticket.run_id, "job_id": job_id})
        return ticket.model_copy(update={"job_id": job_id})

    def prepare_job(self, ticket: RunTicket) -> RunPlan:
        """The StartJob step on AWS: renew the lease (a run whose lease lapsed never starts) and read
        the plan; the state machine starts the run's job itself (so one call starts it)."""
        self._checkpoints.renew_lease(ticket.grant)
        return RunPlan.model_validate_json(self._documents.read_text(ticket.plan_uri))

    def watch(self, ticket: RunTicket) -> WatchResult:
        """Look at the job once and renew the lease once; cancel the job if the lease is lost.

        The lease is renewed whatever the job's state: a finished job's run still holds the topic
        until the commit or abort step ends it, and the gap until the commit step renews it (its
        retries and cold start included) must not be counted from an earlier renewal.
        """
        job_id = ticket.job_id
        status = None if job_id is None else self._jobs.status(job_id)
        try:
            self._checkpoints.renew_lease(ticket.grant)
        except LeaseLostError as exc:
            running = job_id is not None and status is not None and not status.state.is_final
            logger.error(
                "lease lost while the run's job runs; %s",
                _after_lease_loss(job_id, running=running),
                extra={
                    "topic": ticket.topic,
                    "run_id": ticket.run_id,
                    "job_id": job_id,
                    "error": str(exc),
                },
            )
            if job_id is not None and running:
                self._jobs.cancel(job_id)
            return WatchResult(status, lease_lost=True)
        return WatchResult(status)

    def commit_run(self, ticket: RunTicket) -> CommittedRun:
        """Commit the run's result exactly once (see `CommitService.commit_run`). Idempotent.

        Returns the plan and result read for it too (for `metrics.record_commit`). Raises
        `RunNotCommittableError` for a failed or foreign result: the run is then aborted.
        """
        plan = RunPlan.model_validate_json(self._documents.read_text(ticket.plan_uri))
        result = RunResult.model_validate_json(self._documents.read_text(plan.result_uri))
        policy = self._mapping_policy(ticket.topic) if self._mapping_policy else None
        grant = self._hold_or_reclaim(ticket)
        try:
            outcome = self._commit_service().commit_run(plan, result, grant, policy)
        except KafscaleIcebergError as exc:
            decision = decide_commit_failure(exc)
            if decision is not None and decision.refresh_recorded_tables:
                # So the next attempt is planned with the tables' ids (a template's the run wrote
                # too) and an upsert table's current version (a finished stranded run moved it).
                self._record_field_ids(plan, written=tuple(t.identifier for t in result.tables))
            raise
        if outcome.table_committed or outcome.dead_letter_committed or plan.field_ids_digest is None:
            self._record_field_ids(plan, outcome)
        logger.info(
            "run committed",
            extra={
                "topic": ticket.topic,
                "run_id": ticket.run_id,
                "table_committed": outcome.table_committed,
                "records": result.counts.written,
                "dead_lettered": result.counts.dead_lettered,
                # Per column, not CloudWatch dimensions (docs/cost.md): searchable in the log record.
                "column_records": dict(outcome.fill.carried) if outcome.fill is not None else None,
                "unfilled_columns": list(outcome.unfilled),
            },
        )
        return CommittedRun(plan=plan, result=result, outcome=outcome)

    def _hold_or_reclaim(self, ticket: RunTicket) -> LeaseGrant:
        """The grant to commit under: the ticket's, renewed; or, when it lapsed and nobody claimed the
        topic since, a new claim for the same run (the commit then verifies the committed offsets are
        still the plan's start, so a run committed by someone else meanwhile is never committed twice).
        """
        try:
            self._checkpoints.renew_lease(ticket.grant)
        except LeaseLostError:
            if self._checkpoints.read_lease_holder(ticket.topic) is not None:
                raise
            claimed = self._checkpoints.claim_lease(
                ticket.topic, owner_id=ticket.grant.owner_id, run_id=ticket.run_id
            )
            if not isinstance(claimed, LeaseGrant):
                raise
            logger.warning(
                "the run's lease lapsed and nobody claimed the topic since; reclaimed it to commit",
                extra={"topic": ticket.topic, "run_id": ticket.run_id, "token": claimed.token},
            )
            return claimed
        return ticket.grant

    def _record_field_ids(
        self, plan: RunPlan, outcome: CommitOutcome | None = None, *, written: tuple[str, ...] = ()
    ) -> None:
        """Write `field-ids.json` for the plan's topic from its tables' schemas (those the commit just
        read or made, without loading them again; `written`: more tables of the run, e.g. a template's
        after a refused commit), after a commit only when it differs from what the plan was made
        from (`RunPlan.field_ids_digest`). Idempotent."""
        data = [t.identifier for m in plan.mappings for t, r in m.static_targets() if r is TableRole.DATA]
        tables = list(dict.fromkeys([*data, *(m.dead_letter_table.identifier for m in plan.mappings)]))
        if outcome is not None:  # tables a route's template named, as the commit step met them
            tables += [name for name in outcome.states if name not in tables]
        tables += [name for name in written if name not in tables]
        known = self._commit_service().field_ids(tuple(tables), None if outcome is None else outcome.states)
        if any(m.route is not None and m.route.table_template for m in plan.mappings):
            # A template's tables this run did not write keep their recorded ids (not loaded again).
            recorded = self._field_id_records.read(plan.topic) or TopicFieldIds()
            kept = [t for t in recorded.tables if t.identifier not in tables]
            known = TopicFieldIds(tables=(*known.tables, *kept))
        # Only an upsert table's version is read (its next run locates in it): recorded for the others,
        # it would change the document at every commit.
        upsert = {m.table.identifier for m in plan.mappings if m.table and m.conversion.upsert is not None}
        self._field_id_records.write(
            plan.topic,
            known.versions_only_for(upsert),
            unless_digest=None if outcome is None else plan.field_ids_digest,
        )

    def _commit_service(self) -> CommitService:
        if self._commits is None:
            raise ValueError("these run steps were built without a commit service")
        return self._commits()

    def abort(self, ticket: RunTicket, reason: str, *, error: str | None = None) -> AbortResult:
        """Cancel the run's job if it still runs, record the failed attempt (with where the run wrote
        its files: never committed unless a commit of this run landed, so safe to clean up) and the
        topic's backoff, release the lease if still ours, and decide the retry. Idempotent.

        `error`: the error name of the task that failed (the state machine's `$.error.Error`, e.g.
        `Sandbox.Timedout`), which tells a runner its platform killed (`RunnerTraits.killed_by`)."""
        for job_id in self._abandoned_jobs(ticket):
            self._cancel_abandoned(ticket.topic, ticket.run_id, job_id)
        plan = self._read_plan(ticket)
        outcome = FailedAttempt(
            status="aborted",
            reason=reason,
            attempt=ticket.attempt,
            job_id=ticket.job_id,
            ended_at_ms=int(self._clock() * 1000),
            written_under=() if plan is None else _written_under(plan),
        )
        uri = run_document_uri(self._runs.location, ticket.topic, ticket.run_id, OUTCOME_NAME)
        self._documents.write_text(uri, outcome.model_dump_json())
        # Before the release: a launcher claiming the topic right after must see the backoff.
        failures, resignal_s, killed = self._record_backoff(ticket, plan, reason, error)
        released = self._checkpoints.release_lease(ticket.grant)
        alarm = failures >= self._runs.max_consecutive_failures
        facts = {
            "topic": ticket.topic,
            "run_id": ticket.run_id,
            "reason": reason,
            "consecutive_failures": failures,
        }
        decision = None if error is None else decide_commit_failure(error)
        if failures == 0 and decision is not None:  # `_record_backoff`: not the topic's failure
            logger.info(
                "run %s %s (%s): the topic is planned again now",
                ticket.run_id,
                "committed, its offsets not written"
                if error == OffsetsFencedError.__name__
                else "not committed",
                decision.failure.value.replace("_", " "),
                extra={**facts, "failure": decision.failure.value},
            )
        else:
            (logger.error if alarm else logger.warning)("run aborted", extra=facts)
        return AbortResult(
            resignal_after_seconds=resignal_s,
            consecutive_failures=failures,
            alarm=alarm,
            lease_released=released,
            lambda_killed=killed,
        )

    def _abandoned_jobs(self, ticket: RunTicket) -> list[str]:
        """The run's job, when one may still run: the ticket's, or on EMR Serverless (where the state
        machine started it and the ticket has no id) the unfinished jobs named by the run id, created
        since the lease was claimed. A lookup the runner refuses is logged; a transient one raised."""
        if ticket.job_id is not None:
            return [ticket.job_id]
        if not self._runners.traits(ticket.runner).job_started_by_state_machine or not isinstance(
            self._jobs, JobLookup
        ):
            return []
        try:
            return self._jobs.unfinished_jobs(ticket.run_id, created_after_ms=ticket.grant.claimed_at_ms)
        except KafscaleIcebergError as exc:
            if exc.transient:
                raise
            logger.warning(
                "could not look up the aborted run's job to cancel it",
                extra={"topic": ticket.topic, "run_id": ticket.run_id, "error": str(exc)},
            )
            return []

    def _cancel_abandoned(self, topic: str, run_id: str, job_id: str) -> None:
        """Cancel the job an aborted run abandons (so it stops costing); a runner that no longer knows
        the job is logged, a transient failure is raised (the abort step is retried)."""
        try:
            self._jobs.cancel(job_id)
        except KafscaleIcebergError as exc:
            if exc.transient:
                raise
            logger.warning(
                "could not cancel the aborted run's job",
                extra={"topic": topic, "run_id": run_id, "job_id": job_id, "error": str(exc)},
            )

    def _read_plan(self, ticket: RunTicket) -> RunPlan | None:
        try:
            return RunPlan.model_validate_json(self._documents.read_text(ticket.plan_uri))
        except DocumentMissingError:
            return None

    def _record_backoff(
        self, ticket: RunTicket, plan: RunPlan | None, reason: str, error: str | None
    ) -> tuple[int, int, str | None]:
        """Count the failure in the topic's backoff document (honoured by the launcher); the streak,
        the seconds before the topic is signalled again (0 when only one partition is held), and what
        the platform killed the run's runner for (None: it did not; `RunnerTraits.killed_by`)."""
        if plan is None:
            failures = ticket.attempt + 1  # no plan, no starts to key the streak on: the attempt counts
            return failures, self._runs.retry_delay_seconds(failures), None
        decision = None if error is None else decide_commit_failure(error)
        if decision is not None and not decision.topic_failed:
            # A stale plan, a superseded or fenced run (`domain.commit_failures`, the one-machine
            # loop's rule too): not the topic's failure, so re-plan at once.
            return 0, 0, None
        partition = self._failed_partition(plan)
        killed = self._runners.traits(ticket.runner).killed_by(error)
        if killed is not None:
            logger.warning(
                "the topic's next run goes to EMR Serverless: the Lambda runner %s",
                killed,
                extra={"topic": ticket.topic, "run_id": ticket.run_id, "lambda_runner": killed},
            )
        backoff = BackoffRecords(self._documents, self._runs).record_failure(
            ticket.topic,
            starts=plan.start_offsets(),
            run_id=ticket.run_id,
            reason=reason,
            attempt=ticket.attempt,
            now_s=self._clock(),
            partition=partition,
            lambda_killed=killed,
        )
        if partition is not None:
            return backoff.held[partition].failures, 0, killed
        return backoff.failures, self._runs.retry_delay_seconds(backoff.failures), killed

    def _failed_partition(self, plan: RunPlan) -> int | None:
        """The partition a failed run's corrupt segment belongs to (policy `fail`), else None."""
        try:
            result = RunResult.model_validate_json(self._documents.read_text(plan.result_uri))
        except KafscaleIcebergError as exc:  # best effort: the whole topic backs off instead
            logger.warning("could not read the failed run's result", extra={"error": str(exc)})
            return None
        failure = result.failure
        if failure is None or failure.kind is not FailureKind.CORRUPT_SEGMENT or failure.segment_key is None:
            return None
        for partition in plan.partitions:
            if any(s.key == failure.segment_key for s in partition.segments):
                return partition.partition
        return None


def _after_lease_loss(job_id: str | None, *, running: bool) -> str:
    """What happens to a run's job once its lease is lost, as the watch step's log says it."""
    if job_id is None:
        # The state machine started the job (startJobRun.sync) or the Lambda runner runs the tasks:
        # the step has no job to cancel; its branch ends and the abort step stops what still runs.
        return (
            "the run is aborted: Step Functions stops its runner and the abort step cancels a job "
            "still running"
        )
    if running:
        return f"cancelling job {job_id}; the run is aborted"
    return f"job {job_id} already ended; the run is aborted"


def failure_reason(status: JobStatus | None, *, lease_lost: bool) -> str:
    """A one-line reason for an aborted run, from its last job status (None: its job is the state
    machine's, not looked at)."""
    if status is None:
        return "lease lost; the run's job is stopped" if lease_lost else "the job's state is not known here"
    if lease_lost:
        return f"lease lost while job {status.job_id} was {status.runner_state}; job cancelled"
    if status.state is JobState.SUCCEEDED:
        return f"job {status.job_id} succeeded but its result could not be committed"
    return f"job {status.job_id} ended {status.runner_state}: {status.detail}".rstrip(": ")


def _written_under(plan: RunPlan) -> tuple[str, ...]:
    """The run folders of the plan's tables (data tables first, then dead letters; a route template's
    tables are found by orphan cleanup under their own data prefixes)."""
    data = [t.data_uri for m in plan.mappings for t, role in m.static_targets() if role is TableRole.DATA]
    return tuple(dict.fromkeys([*data, *(m.dead_letter_table.data_uri for m in plan.mappings)]))


def run_to_end(
    jobs: WaitingJobRunner, documents: RunDocuments, ticket: RunTicket, timeout_s: float
) -> RunTicket:
    """Run the ticket's plan on `jobs` (the in-process runner: the Lambda runner's step) until it ends;
    the ticket with its job id. Idempotent (the job id is the run id; a rerun rewrites the same
    files). Raises `RunNotCommittableError` when the run failed or did not end within `timeout_s`
    (the state machine then aborts the run). The lease is the state machine's renewal branch's."""
    plan = RunPlan.model_validate_json(documents.read_text(ticket.plan_uri))
    job_id = jobs.start(plan, ticket.plan_uri)
    ended = jobs.wait(job_id, timeout_s)
    status = jobs.status(job_id)
    if not ended or status.state is not JobState.SUCCEEDED:
        jobs.cancel(job_id)
        problem = failure_reason(status, lease_lost=False) if ended else f"not done within {timeout_s:.0f} s"
        raise RunNotCommittableError(ticket.run_id, f"its in-process run failed: {problem}")
    logger.info("in-process run ended", extra={"topic": ticket.topic, "run_id": ticket.run_id})
    return ticket.model_copy(update={"job_id": job_id})
