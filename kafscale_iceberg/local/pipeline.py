"""The one-machine pipeline: the AWS flow's services wired into one process.

What Lambda, SQS and Step Functions do in AWS, a plain loop does here, calling the same services:

- **signals**: S3 notifications from `notifications.queue_url` (through the same `Router`) when a
  queue is configured, and the `Reconciler` every `processor.poll_interval_seconds` — which, with no
  queue, *is* discovery (the Go processor's polling), and with one, recovers lost notifications;
- **launch**: `Launcher.launch(topic)` with a starter that hands the ticket back to this loop;
- **steps**: `start_job` → `watch` (renewing the lease) until the job ends → `commit`, or `abort`
  (outcome recorded, lease released, retried after the backoff) — the state machine, as a loop.

Runs execute one at a time (a 2-core machine gains nothing from two Spark jobs at once), and after
a commit the topic is launched again at once, so a backlog drains run after run.

Stopping (`stop()`, SIGINT/SIGTERM in `run`) is checked between steps: a running job is cancelled
and aborted (lease released, attempt recorded); a commit in progress completes. Either way nothing
is half-committed, and the next start plans from the committed offsets.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from kafscale_iceberg.adapters.foreign_errors import is_unreachable
from kafscale_iceberg.domain.commit_failures import CommitAction, CommitDecision, decide_commit_failure
from kafscale_iceberg.domain.events import WorkItem
from kafscale_iceberg.domain.finished_runs import FinishedRun
from kafscale_iceberg.domain.jobs import JobState
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.exceptions import (
    ConfigError,
    KafscaleIcebergError,
    OffsetsFencedError,
    OffsetsNotRecordedError,
    RunAttemptEndedError,
    RunSupersededError,
)
from kafscale_iceberg.local.run_reports import RunEnd, RunReport
from kafscale_iceberg.metrics import ErrorStage, Readiness, error_stage
from kafscale_iceberg.ports import AwaitableJobRunner, JobRunner
from kafscale_iceberg.services.launch import LaunchStatus
from kafscale_iceberg.services.run_steps import failure_reason

if TYPE_CHECKING:
    from kafscale_iceberg.adapters.sqs_queues import SqsReceiver
    from kafscale_iceberg.assembly import Assembly
    from kafscale_iceberg.services.launch import Launcher
    from kafscale_iceberg.services.reconcile import Reconciler
    from kafscale_iceberg.services.route import Router
    from kafscale_iceberg.services.run_steps import RunSteps

logger = logging.getLogger(__name__)

_COMMIT_ATTEMPTS = 3
_CANCEL_WAIT_S = 60.0


@dataclass(frozen=True)
class _Start:
    """When the loop took a run: a monotonic reading (durations) and the wall clock (reports)."""

    monotonic: float
    wall: float


class PipelineObserver(Protocol):
    """What the loop tells the outside (progress display, metrics)."""

    def run_started(self, ticket: RunTicket, plan: RunPlan) -> None: ...

    def run_ended(self, report: RunReport, plan: RunPlan) -> None:
        """A run ended; a committed one's plan, result and commit outcome are in `report.commit`."""

    def error(self, stage: str, topic: str | None, error: Exception) -> None: ...


class _Inbox:
    """Topics to look at: the router's work queue and the reconciler's signaller, in one."""

    def __init__(self) -> None:
        self._topics: dict[str, str] = {}
        self._lock = threading.Lock()

    def send_work_items(self, items: Sequence[WorkItem]) -> None:
        with self._lock:
            for item in items:
                self._topics.setdefault(item.topic, f"segment {item.key}")

    def signal(self, topic: str, reason: str) -> None:
        with self._lock:
            self._topics.setdefault(topic, reason)

    def drain(self) -> list[str]:
        with self._lock:
            topics = list(self._topics)
            self._topics.clear()
        return topics


class _LocalStarter:
    """The launcher's `RunStarter`: tickets come back to the loop, which drives them."""

    def __init__(self) -> None:
        self.tickets: deque[RunTicket] = deque()
        self.active: set[str] = set()
        self.ended: set[str] = set()

    def start_run(self, ticket: RunTicket) -> None:
        if ticket.run_id in self.ended:
            # As Step Functions refuses an execution name twice: a range planned again after a
            # reset gets the next attempt, so its job runs anew with today's settings.
            raise RunAttemptEndedError(ticket.run_id, "this run id already ran in this process")
        self.tickets.append(ticket)

    def is_running(self, run_id: str) -> bool | None:
        """The reconciler's question: runs of this process are known; others' are not."""
        return True if run_id in self.active else None


@dataclass
class OnceSummary:
    """What `run --once` did: every run, and the topics left not fully committed (with why)."""

    runs: list[RunReport] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    """What could not be reached (etcd, S3, SQS, the catalog), as the errors named it."""

    @property
    def ok(self) -> bool:
        """True when every pending topic was committed."""
        return not self.failed

    @property
    def finished(self) -> list[FinishedRun]:
        """The runs stranded between their tables' commits that these runs' commits finished."""
        return [r.finished for r in self.runs if r.finished is not None]


@dataclass
class _LoopState:
    """`run_forever`'s state between iterations."""

    next_pass: float = 0.0
    outages: int = 0
    retry_at: dict[str, float] = field(default_factory=dict)
    topic: str | None = None
    """The topic being processed (what an outage met names it)."""


def outage_delay_seconds(outages: int, backoff_s: tuple[float, float]) -> float:
    """The wait after the `outages`-th consecutive failure: doubled each time up to the longest, then
    scaled by a random factor in [0.5, 1] so runners sharing a dependency don't retry in step."""
    first, longest = backoff_s
    return min(longest, first * 2.0 ** min(outages - 1, 30)) * random.uniform(0.5, 1.0)


def is_outage(error: BaseException) -> bool:
    """Whether `error` means a dependency is unavailable for now (etcd, S3, SQS, the catalog): `run`
    rides it out. Anything else - a defect, or a state a person must fix - is not an outage.

    Our errors carry the verdict (`transient`, set by the adapter that translated the SDK's error).
    A foreign error is an outage when it, or an error it was raised from, is a connection error, a
    timeout, or an AWS answer of throttling or a 5xx (`adapters.foreign_errors.is_unreachable`).
    """
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KafscaleIcebergError):
            return seen.transient
        if is_unreachable(seen):
            return True
        seen = seen.__cause__
    return False


def describe_outage(error: BaseException) -> str:
    """What failed, for `/healthz` and `run --once`: the error's kind and message, on one line."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Pipeline:
    """The one-machine loop (see the module docstring). Not thread-safe: one loop per instance."""

    def __init__(
        self,
        assembly: Assembly,
        runner: JobRunner,
        *,
        observer: PipelineObserver | None = None,
        after_pass: Callable[[], None] | None = None,
        watch_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        outage_backoff_s: tuple[float, float] = (1.0, 60.0),
    ) -> None:
        """`outage_backoff_s` = (first, longest) wait after a dependency failed in `run_forever`;
        doubled per consecutive failure, with jitter. `first` also paces the retries of a commit that
        failed transiently (`first` x attempt) and the reads of a notification queue that failed."""
        self.assembly = assembly
        self._runner = runner
        self._observer = observer
        self._after_pass = after_pass
        self._watch_interval_s = watch_interval_s
        self._clock = clock
        self._starter = _LocalStarter()
        self._inbox = _Inbox()
        self.stopping = threading.Event()
        self.launcher: Launcher = assembly.make_launcher(self._starter, repair_from_table=True)
        self.reconciler: Reconciler = assembly.make_reconciler(self._inbox, self._starter)
        self.steps: RunSteps = assembly.make_run_steps(runner)
        self._router: Router | None = None
        self._receiver: SqsReceiver | None = None
        self._outage_backoff_s = outage_backoff_s
        self._in_flight: RunTicket | None = None
        self._queue_problem: str | None = None
        """Why the notification queue cannot be read now (None: it can, or there is none)."""
        self.health = Readiness()
        """Ready, or not ready with the reason (an outage): what `/healthz` answers."""

    def stop(self) -> None:
        """Ask the loop to stop at the next step boundary (safe from a signal handler)."""
        self.stopping.set()

    @property
    def work_queue(self) -> _Inbox:
        """The in-process work queue: work items and topic signals sent here are launched by the loop
        (`run_forever`, or `process_signalled`). Replay enqueues here on one machine."""
        return self._inbox

    def process_signalled(self) -> list[str]:
        """Launch every topic signalled so far (once each, draining their backlogs); the topics."""
        topics = self._inbox.drain()
        for topic in topics:
            self.process_topic(topic)
        return topics

    # -- run --once --------------------------------------------------------------------------------

    def run_once(self, *, busy_wait_s: float | None = None) -> OnceSummary:
        """Commit everything pending now, topic by topic, ignoring the minimum batch; never retries
        a failed run (the summary says why it failed). A topic another process holds is waited for
        up to `busy_wait_s` (default: twice the lease TTL)."""
        ttl = self.assembly.config.offsets.lease_ttl_seconds
        busy_wait_s = 2.0 * ttl if busy_wait_s is None else busy_wait_s
        summary = OnceSummary()
        try:
            topics = self.assembly.discovery.discover().topics
        except Exception as exc:
            if not is_outage(exc):
                raise
            summary.unavailable.append(describe_outage(exc))
            summary.failed["*"] = f"topics could not be discovered: {describe_outage(exc)}"
            return summary
        for topic in topics:
            if self.stopping.is_set():
                summary.failed.setdefault(topic, "stopped before this topic was processed")
                continue
            try:
                self._once_topic(topic, summary, busy_wait_s)
            except ConfigError:
                raise
            except Exception as exc:
                if is_outage(exc):
                    summary.unavailable.append(describe_outage(exc))
                    summary.failed[topic] = f"unavailable: {describe_outage(exc)}"
                else:
                    logger.critical("%s: unexpected error", topic, exc_info=exc)
                    summary.failed[topic] = f"unexpected error (see the traceback): {describe_outage(exc)}"
        return summary

    def _once_topic(self, topic: str, summary: OnceSummary, busy_wait_s: float) -> None:
        busy_since: float | None = None
        replanned = False
        failed_runs = 0
        while not self.stopping.is_set():
            try:
                outcome = self.launcher.launch(
                    topic, ignore_min_batch=True, ignore_backoff=True, ignore_held=failed_runs == 0
                )
            except KafscaleIcebergError as exc:
                self._error(ErrorStage.LAUNCH, topic, exc)
                if exc.transient:
                    summary.unavailable.append(describe_outage(exc))
                summary.failed[topic] = f"planning failed: {exc}"
                return
            if outcome.status is LaunchStatus.BUSY:
                busy_since = self._clock() if busy_since is None else busy_since
                if self._clock() - busy_since > busy_wait_s:
                    summary.failed[topic] = f"busy for {busy_wait_s:.0f} s: {outcome.detail}"
                    return
                # A fraction of the lease TTL (at most 1 s): a dead holder's lease is noticed soon after
                # it expires, however short the TTL.
                self.stopping.wait(min(1.0, self.assembly.config.offsets.lease_ttl_seconds / 8))
                continue
            if outcome.status is LaunchStatus.BLOCKED:
                summary.blocked[topic] = outcome.detail
            if outcome.status is not LaunchStatus.STARTED:
                return
            report = self.drive(self._starter.tickets.popleft())
            summary.runs.append(report)
            if report.replan and not replanned:
                replanned = True
                continue
            if report.end is not RunEnd.COMMITTED:
                summary.failed[topic] = f"run {report.run_id} {report.end.value}: {report.reason}"
                failed_runs += 1
                if report.retry_after_seconds == 0 and report.end is RunEnd.ABORTED and failed_runs == 1:
                    continue  # one partition failed on its own segment: it is held, the others run
                return
        summary.failed.setdefault(topic, "stopped")

    # -- run (continuous) --------------------------------------------------------------------------

    def run_forever(self) -> None:
        """Ingest as segments arrive until `stop()`: notifications (if configured) and a reconciler
        pass (then `after_pass`, e.g. the status gauges) every poll interval; failed topics are
        retried after their backoff.

        Rides out outages: when a dependency (etcd, S3, SQS, the catalog) is unavailable
        (`is_outage`), the run in flight is abandoned (its job cancelled, its lease released when
        possible, else left to expire), `health` turns not-ready with the reason, and the loop
        retries after a jittered exponential backoff, ready again after its next successful
        reconciler pass. Anything else ends it, raised to the caller after the run in flight was
        abandoned the same way: a `ConfigError` (a person must act), another terminal error of ours,
        or a defect (logged with its traceback) - never kept alive and not-ready forever. And `stop()`.
        """
        poll_s = float(self.assembly.config.processor.poll_interval_seconds)
        loop = _LoopState()
        while not self.stopping.is_set():
            try:
                self._loop_once(loop, poll_s)
            except ConfigError:
                raise
            except Exception as exc:
                if not is_outage(exc):
                    self.health.not_ready(f"stopped: {describe_outage(exc)}")
                    self._error(ErrorStage.DISCOVER, None, exc)
                    # A defect gets its traceback; our terminal errors say what to do in their message.
                    defect = not isinstance(exc, KafscaleIcebergError)
                    logger.critical(
                        "stopping: %s (not a dependency outage)",
                        describe_outage(exc),
                        exc_info=exc if defect else None,
                    )
                    raise
                loop.outages += 1
                delay = outage_delay_seconds(loop.outages, self._outage_backoff_s)
                reason = describe_outage(exc)
                self.health.not_ready(reason)
                self._error(ErrorStage.DISCOVER, loop.topic, exc)
                logger.warning(
                    "dependency unavailable; retrying in %.1f s: %s",
                    delay,
                    reason,
                    extra={"outages": loop.outages, "retry_in_s": round(delay, 1)},
                )
                loop.next_pass, loop.topic = 0.0, None  # look at everything again once it is back
                self.stopping.wait(delay)

    def _loop_once(self, loop: _LoopState, poll_s: float) -> None:
        self._receive_notifications()
        now = self._clock()
        if now >= loop.next_pass:
            loop.next_pass = now + poll_s
            self.reconciler.reconcile()
            if loop.outages:
                logger.warning("dependencies reachable again; resuming", extra={"outages": loop.outages})
            loop.outages = 0
            if self._queue_problem is None:
                self.health.ready()
            else:
                self.health.not_ready(self._queue_reason())
            if self._after_pass is not None:
                try:
                    self._after_pass()
                except KafscaleIcebergError as exc:
                    self._error(ErrorStage.DISCOVER, None, exc)
        due = [t for t, at in loop.retry_at.items() if at <= now]
        for topic in dict.fromkeys([*self._inbox.drain(), *due]):
            loop.retry_at.pop(topic, None)
            loop.topic = topic
            try:
                delay = self.process_topic(topic)
            except BaseException:
                self._inbox.signal(topic, "retried after an outage")
                raise
            loop.topic = None
            if delay is not None:
                loop.retry_at[topic] = self._clock() + delay
        if not self.assembly.config.notifications.queue_url:
            self.stopping.wait(min(1.0, max(0.0, loop.next_pass - self._clock())))

    def process_topic(self, topic: str) -> float | None:
        """Launch and drive runs of `topic` until nothing is pending; seconds until a retry, if any."""
        while not self.stopping.is_set():
            try:
                outcome = self.launcher.launch(topic)
            except KafscaleIcebergError as exc:
                if exc.transient:
                    raise  # an outage: the loop backs off (and reports not-ready)
                self._error(ErrorStage.LAUNCH, topic, exc)
                return float(self.assembly.config.runs.retry_delay_seconds(1))
            if outcome.status is LaunchStatus.WAITING:
                return outcome.wait_seconds
            if outcome.status is not LaunchStatus.STARTED:
                return None  # idle, busy (the holder re-checks when it ends), blocked (next event)
            report = self.drive(self._starter.tickets.popleft())
            if report.end is not RunEnd.COMMITTED:
                return float(report.retry_after_seconds)
        return None

    def _receive_notifications(self) -> None:
        url = self.assembly.config.notifications.queue_url
        if not url:
            return
        if self._receiver is None:
            self._router, self._receiver = self._notification_path(url)
        assert self._router is not None
        try:
            messages = self._receiver.receive(wait_seconds=1)
        except KafscaleIcebergError as exc:
            self._notifications_down(exc)
            return
        for message in messages:
            try:
                self._router.route_message(message.body, message.message_id)
            except KafscaleIcebergError as exc:
                # Left on the queue: redelivered after its visibility timeout (an incomplete segment),
                # and moved to its dead-letter queue by the redrive policy when it never routes.
                self._error(ErrorStage.ROUTE, None, exc)
                continue
            try:
                self._receiver.delete(message)
            except KafscaleIcebergError as exc:
                # Redelivered after its visibility timeout; the inbox launches a topic once either way.
                self._notifications_down(exc)
                return
        if self._queue_problem is not None:
            logger.warning("notifications reachable again", extra={"queue_url": url})
            self._queue_problem = None  # ready again at the next reconciler pass

    def _notifications_down(self, error: KafscaleIcebergError) -> None:
        """The queue cannot be read: not ready (with the reason) while it lasts, but ingestion goes on -
        the reconciler's pass every poll interval finds new segments without notifications."""
        self._error(ErrorStage.ROUTE, None, error)
        self._queue_problem = describe_outage(error)
        self.health.not_ready(self._queue_reason())
        self.stopping.wait(self._outage_backoff_s[0])

    def _queue_reason(self) -> str:
        return f"notifications unavailable (polling S3 meanwhile): {self._queue_problem}"

    def _notification_path(self, url: str) -> tuple[Router, SqsReceiver]:
        return self.assembly.make_router(self._inbox), self.assembly.make_notification_receiver(url)

    # -- one run -----------------------------------------------------------------------------------

    def drive(self, ticket: RunTicket) -> RunReport:
        """Take one launched run through its steps: start, watch, then commit or abort."""
        start = _Start(self._clock(), time.time())
        self._starter.active.add(ticket.run_id)
        self._in_flight = ticket
        try:
            plan = RunPlan.model_validate_json(self.assembly.documents.read_text(ticket.plan_uri))
            if self._observer:
                self._observer.run_started(ticket, plan)
            report = self._drive(ticket, plan, start)
        except Exception as exc:
            self._abandon(self._in_flight or ticket, exc)
            raise
        finally:
            self._in_flight = None
            self._starter.active.discard(ticket.run_id)
            self._starter.ended.add(ticket.run_id)
        if self._observer:
            self._observer.run_ended(report, plan)
        return report

    def _drive(self, ticket: RunTicket, plan: RunPlan, start: _Start) -> RunReport:
        try:
            ticket = self.steps.start_job(ticket)
        except KafscaleIcebergError as exc:
            if exc.transient:
                raise  # an outage (the lease could not be renewed, S3 down): abandoned, retried
            self._error(ErrorStage.JOB, ticket.topic, exc)
            return self._abort(ticket, plan, start, f"the job could not start: {exc}")
        self._in_flight = ticket
        while True:
            watched = self.steps.watch(ticket)
            if watched.is_final:
                break
            if self.stopping.is_set():
                return self._cancel(ticket, plan, start)
            self._wait_for_job(ticket)
        if watched.status is None or watched.status.state is not JobState.SUCCEEDED or watched.lease_lost:
            return self._abort(
                ticket, plan, start, failure_reason(watched.status, lease_lost=watched.lease_lost)
            )
        return self._commit(ticket, plan, start)

    def _wait_for_job(self, ticket: RunTicket) -> None:
        """Until the next watch: the job's end when the runner can wait on it (the local runner),
        else the watch interval; at most the watch interval either way, so the lease keeps being
        renewed and a stop is seen."""
        if isinstance(self._runner, AwaitableJobRunner):
            self._runner.wait(ticket.job_id or ticket.run_id, self._watch_interval_s)
        else:
            self.stopping.wait(self._watch_interval_s)

    def _commit(self, ticket: RunTicket, plan: RunPlan, start: _Start) -> RunReport:
        commit_started_at = time.time()
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            try:
                committed = self.steps.commit_run(ticket)
                break
            except KafscaleIcebergError as exc:
                decision = decide_commit_failure(exc)
                assert decision is not None  # an exception always has a meaning
                # A conflict, or an outage that may pass within the attempts (the offsets of a
                # committed run wait on the store instead: the next plan brings them up).
                again = decision.action is CommitAction.RETRY or (
                    decision.action is CommitAction.BACK_OFF and not isinstance(exc, OffsetsNotRecordedError)
                )
                if again and attempt < _COMMIT_ATTEMPTS:
                    logger.info("commit failed for now (attempt %d), trying again: %s", attempt, exc)
                    self.stopping.wait(self._outage_backoff_s[0] * attempt)
                    continue
                return self._commit_failed(ticket, plan, start, exc, decision)
        result = committed.result
        return RunReport(
            topic=ticket.topic,
            run_id=ticket.run_id,
            end=RunEnd.COMMITTED,
            seconds=self._clock() - start.monotonic,
            segments=plan.segment_count,
            records=result.counts.written,
            dead_lettered=result.counts.dead_lettered,
            quarantined=sum(len(p.quarantined) for p in result.partitions),
            skipped_lfs=result.counts.skipped_lfs,
            lfs_resolved=result.counts.lfs.resolved,
            lfs_errors=dict(result.counts.lfs.errors),
            offsets=dict(committed.outcome.offsets),
            started_at=start.wall,
            commit=committed,
            commit_started_at=commit_started_at,
            commit_ended_at=time.time(),
            finished=committed.outcome.finished,
            commit_attempts=attempt,
        )

    def _commit_failed(
        self,
        ticket: RunTicket,
        plan: RunPlan,
        start: _Start,
        error: KafscaleIcebergError,
        decision: CommitDecision,
    ) -> RunReport:
        """Act on a commit failure as `domain.commit_failures` decides (the AWS abort step's rule too):
        re-plan now (no ERROR: nothing is wrong with the topic), abort with the fix, or raise an outage
        (`drive` abandons the run, the loop backs off)."""
        if decision.action in (CommitAction.BACK_OFF, CommitAction.RETRY):
            # Still unavailable (the catalog, etcd, S3) or still conflicting after the attempts: an
            # outage, not this run's failure (`OffsetsNotRecordedError`: the rows are in, the offsets
            # catch up from the table once the store is back; `_abandon` aborts nothing then).
            self._error(ErrorStage.SINK, ticket.topic, error)
            raise error
        if decision.topic_failed:
            self._error(ErrorStage.SINK, ticket.topic, error)
            return self._abort(ticket, plan, start, f"commit failed: {error}", error=type(error).__name__)
        aborted = self._abort(ticket, plan, start, str(error), error=type(error).__name__)
        if isinstance(error, RunSupersededError):  # a recovery, not a failure: no error reported
            return replace(
                aborted, end=RunEnd.SUPERSEDED, retry_after_seconds=0, replan=True, finished=error.finished
            )
        if isinstance(error, OffsetsFencedError):  # its rows are in; the next plan repairs the offsets
            logger.warning("%s", error, extra={"topic": ticket.topic, "run_id": ticket.run_id})
            return replace(aborted, end=RunEnd.SUPERSEDED, retry_after_seconds=0, replan=True)
        logger.warning(
            "run %s not committed (%s): %s; the topic is planned again now",
            ticket.run_id,
            decision.failure.value.replace("_", " "),
            error,
            extra={"topic": ticket.topic, "run_id": ticket.run_id, "failure": decision.failure.value},
        )
        return replace(aborted, retry_after_seconds=0, replan=True)

    def _cancel(self, ticket: RunTicket, plan: RunPlan, start: _Start) -> RunReport:
        job_id = ticket.job_id or ticket.run_id
        self._runner.cancel(job_id)
        deadline = self._clock() + _CANCEL_WAIT_S
        while not self._runner.status(job_id).state.is_final and self._clock() < deadline:
            time.sleep(0.2)
        report = self._abort(ticket, plan, start, "stopped: the job was cancelled at shutdown")
        return replace(report, end=RunEnd.CANCELLED)

    def _abandon(self, ticket: RunTicket, error: Exception) -> None:
        """Give up the run in flight after a failure: cancel its job, record it and release the lease
        when the dependencies allow (else the lease expires by itself and the next plan of the
        range takes the next attempt). Never raises."""
        if isinstance(error, OffsetsNotRecordedError):
            logger.warning(
                "run %s committed; its offsets catch up from the table once the checkpoint store is back",
                ticket.run_id,
                extra={"topic": ticket.topic, "run_id": ticket.run_id},
            )
            with contextlib.suppress(KafscaleIcebergError):  # else it expires by itself
                self.assembly.checkpoints.release_lease(ticket.grant)
            return
        reason = f"abandoned: {describe_outage(error)}"
        logger.warning(
            "run abandoned", extra={"topic": ticket.topic, "run_id": ticket.run_id, "reason": reason}
        )
        if ticket.job_id is not None:
            try:
                self._runner.cancel(ticket.job_id)
            except Exception as exc:
                logger.warning("could not cancel the abandoned run's job: %s", exc)
        try:
            self.steps.abort(ticket, reason)
        except Exception as exc:
            logger.warning(
                "could not record the abandoned run or release its lease (it expires by itself): %s",
                describe_outage(exc),
                extra={"topic": ticket.topic, "run_id": ticket.run_id},
            )

    def _abort(
        self, ticket: RunTicket, plan: RunPlan, start: _Start, reason: str, *, error: str | None = None
    ) -> RunReport:
        aborted = self.steps.abort(ticket, reason, error=error)
        return RunReport(
            topic=ticket.topic,
            run_id=ticket.run_id,
            end=RunEnd.ABORTED,
            seconds=self._clock() - start.monotonic,
            segments=plan.segment_count,
            reason=reason,
            retry_after_seconds=aborted.resignal_after_seconds,
            consecutive_failures=aborted.consecutive_failures,
            started_at=start.wall,
        )

    def _error(self, stage: ErrorStage, topic: str | None, error: Exception) -> None:
        """Report a failure in `stage`, counted under the dependency that failed when it names one
        (`error_stage`: the rule the Lambdas use, so a lease lost at commit is `checkpoint` here too)."""
        stage = error_stage(error, default=stage)
        topic = topic or getattr(error, "topic", None)
        # With an observer (`run`'s progress lines) the person reads it there, once; the record stays
        # for a configured log handler at DEBUG.
        level = logging.DEBUG if self._observer else logging.ERROR
        logger.log(level, "%s failed: %s", stage, error, extra={"stage": stage, "topic": topic})
        if self._observer:
            self._observer.error(stage, topic, error)
