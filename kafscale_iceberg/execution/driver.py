"""The run driver: a run plan in, Iceberg-ready Parquet files and a run result out, whatever maps the tasks.

`run_plan(plan_uri, executor)` is the whole job but for one step: read and check the plan, cut it into
tasks of about equal bytes (`dataplane/assignments.plan_tasks`), for an inferred table run the observation
stage and decide the columns (`observe_columns`), map every task to its report, and fold the reports
into `result.json` (`dataplane/reports.build_run_result`); for an upsert table, then locate the changed
keys in the table and rewrite the files holding them as a second stage of tasks
(`execution/upsert_stage.py`). Mapping the tasks is the `TaskExecutor`'s:
Spark spreads them over its executors (`spark_app/job.SparkTaskExecutor`, on EMR Serverless and local
Spark), the in-process executor runs them in this process (`execution/in_process.py`: the Lambda
runner and `runner.type: inline`). Both run the same task code (`TaskRunner`, `ObservationRunner`:
picklable, their storage clients made where they run), so a plan gives the same files and the same
result on either.

Every run ends with a result at the plan's `result_uri`: succeeded with its files, or failed with a
typed reason and no files. A failed run's already-written files stay under its run-scoped prefixes and
are never listed.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import urlparse

from pydantic import ValidationError

from kafscale_iceberg.adapters.confluent_registry import RegistryCredentials
from kafscale_iceberg.adapters.documents import DocumentStore, join_uri
from kafscale_iceberg.adapters.lfs_blobs import LocalBlobReader, S3BlobReader, blob_reader_for
from kafscale_iceberg.adapters.registries import record_schema_registry
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.dataplane.assignments import DEFAULT_MAX_TASK_BYTES, DEFAULT_MIN_TASK_BYTES, plan_tasks
from kafscale_iceberg.dataplane.conversion import RecordConverter
from kafscale_iceberg.dataplane.inference import with_inferred_columns
from kafscale_iceberg.dataplane.observation import observe_task
from kafscale_iceberg.dataplane.partitioning import check_partitioning
from kafscale_iceberg.dataplane.prefetch import PrefetchLimits
from kafscale_iceberg.dataplane.reports import (
    TaskAssignment,
    TaskObservation,
    TaskReport,
    build_run_result,
    failed_result,
)
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA, data_schema, with_field_ids
from kafscale_iceberg.dataplane.tasks import run_task
from kafscale_iceberg.domain.inference import merge_observations
from kafscale_iceberg.domain.runs import (
    FailureKind,
    RegistrySettings,
    RunFailure,
    RunPlan,
    RunResult,
    RunTimings,
    SegmentSource,
    TableRole,
    validate_run_id,
)
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.exceptions import InvalidJsonSchemaError, KafscaleIcebergError, PartitioningError
from kafscale_iceberg.execution.stores import worker_stores
from kafscale_iceberg.execution.upsert_stage import run_upsert_stage
from kafscale_iceberg.ports import RecordSchemaRegistry, TaskExecutor

logger = logging.getLogger(__name__)

TASKS_PER_CORE = 2
_MAX_MESSAGE = 4000


@dataclass(frozen=True)
class TaskSizing:
    """How a run is cut into tasks; `max_tasks` None = `TASKS_PER_CORE` x the executor's parallelism.

    `prefetch` is how far ahead each task reads its segments (`max_in_flight=1`: one at a time).
    """

    max_tasks: int | None = None
    min_task_bytes: int = DEFAULT_MIN_TASK_BYTES
    max_task_bytes: int = DEFAULT_MAX_TASK_BYTES
    prefetch: PrefetchLimits = field(default_factory=PrefetchLimits)


@dataclass(frozen=True)
class _TaskFunction:
    """What a task function of a run carries to where it runs: only picklable values (the plan as
    JSON, the run's tasks, how to reach storage); clients are made there, once per process."""

    plan_json: str
    tasks: tuple[TaskAssignment, ...]
    s3: S3Settings
    prefetch: PrefetchLimits = field(default_factory=PrefetchLimits)
    registry_credentials: RegistryCredentials | None = None


@dataclass(frozen=True)
class TaskRunner(_TaskFunction):
    """The function each task runs: task ids in, one JSON `TaskReport` per task out."""

    def __call__(self, task_indexes: Iterable[int]) -> Iterator[str]:
        plan = _parsed_plan(self.plan_json)
        reader, sink = worker_stores(self.s3)
        blobs = _worker_blobs(plan.source, self.s3, plan.conversion.lfs.resolve_concurrency)
        registry = _worker_registry(plan.schema_registry, self.registry_credentials)
        for task_index in task_indexes:
            report = run_task(
                plan,
                self.tasks[task_index],
                reader=reader,
                sink=sink,
                blobs=blobs,
                prefetch=self.prefetch,
                registry=registry,
            )
            yield report.model_dump_json()


@dataclass(frozen=True)
class ObservationRunner(_TaskFunction):
    """The function each task of an inferred table's first stage runs: task ids in, one JSON
    `TaskObservation` per task out (what its records' fields hold; nothing is written)."""

    def __call__(self, task_indexes: Iterable[int]) -> Iterator[str]:
        plan = _parsed_plan(self.plan_json)
        reader, _sink = worker_stores(self.s3)
        registry = _worker_registry(plan.schema_registry, self.registry_credentials)
        for task_index in task_indexes:
            yield observe_task(
                plan, self.tasks[task_index], reader=reader, prefetch=self.prefetch, registry=registry
            ).model_dump_json()


@functools.lru_cache(maxsize=4)
def _parsed_plan(plan_json: str) -> RunPlan:
    """The plan of a task's JSON, parsed once per process (every task of a run carries the same)."""
    return RunPlan.model_validate_json(plan_json)


@functools.cache
def _worker_blobs(source: SegmentSource, s3: S3Settings, concurrency: int) -> S3BlobReader | LocalBlobReader:
    """One LFS blob reader per process, source and concurrency (its pool fits the threads)."""
    return blob_reader_for(source, s3, concurrency=concurrency)


@functools.cache
def _worker_registry(
    settings: RegistrySettings | None, credentials: RegistryCredentials | None
) -> RecordSchemaRegistry | None:
    """One schema registry client per process and settings: a schema by id is fetched once per
    process, however many tasks read it."""
    if settings is None:
        return None
    return record_schema_registry(settings, credentials)


def registry_credentials_for(plan: RunPlan, given: RegistryCredentials | None) -> RegistryCredentials | None:
    """The registry credentials a run's tasks use: `given` (the one-machine runner's, from its config),
    else those in the plan's `credentials_secret` (Secrets Manager: `{"username", "password"}` or
    `{"token"}`), else none. Raises `SecretAccessError`/`SecretUnavailableError` reading the secret."""
    settings = plan.schema_registry
    if given is not None or settings is None or not settings.credentials_secret:
        return given
    from kafscale_iceberg.adapters.secrets_manager import SecretsManagerSecretSource  # noqa: PLC0415

    text = SecretsManagerSecretSource(region=settings.region).read_secret(settings.credentials_secret)
    try:
        values = json.loads(text)
    except json.JSONDecodeError:
        raise _InvalidPlanError(
            f"secret {settings.credentials_secret} is not JSON: "
            'store {"username", "password"} or {"token"}'
        ) from None
    if not isinstance(values, dict):
        raise _InvalidPlanError(f"secret {settings.credentials_secret} must be a JSON object")
    return RegistryCredentials(
        username=str(values.get("username", "")),
        password=str(values.get("password", "")),
        token=str(values.get("token", "")),
    )


def observe_columns(executor: TaskExecutor, runner: ObservationRunner) -> tuple[RunPlan, float]:
    """The first stage of an inferred table: every task observes its records' fields, the driver
    merges the observations (per destination table) and decides the columns and their field ids;
    the plan the conversion stage then runs (`dataplane/inference.with_inferred_columns`), and the
    tasks' seconds summed."""
    documents = executor.map_tasks(runner, len(runner.tasks))
    observations = sorted(
        (TaskObservation.model_validate_json(d) for d in documents), key=lambda o: o.task_index
    )
    merged = merge_observations(o.tables for o in observations)
    plan = with_inferred_columns(RunPlan.model_validate_json(runner.plan_json), merged)
    return plan, sum(o.seconds for o in observations)


def run_tasks(executor: TaskExecutor, runner: TaskRunner) -> list[TaskReport]:
    """Run every task of `runner` on `executor`; the reports, in task order."""
    documents = executor.map_tasks(runner, len(runner.tasks))
    return sorted((TaskReport.model_validate_json(d) for d in documents), key=lambda r: r.task_index)


def run_plan(
    plan_uri: str,
    executor: TaskExecutor,
    *,
    s3: S3Settings | None = None,
    session_start_s: float = 0.0,
    sizing: TaskSizing | None = None,
    registry_credentials: RegistryCredentials | None = None,
) -> RunResult:
    """Run the plan at `plan_uri` on `executor`; write the result to the plan's `result_uri` and return it.

    `registry_credentials`: the schema registry's (the one-machine runner passes its config's; on AWS
    they come from the plan's `schema_registry.credentials_secret`).

    `s3` reaches the plan (and, when the plan's segments are local, the output and result); an S3
    segment source's endpoint, region and path style are used for everything else. Never raises
    for a failed run: the returned (and written) result says why. Idempotent: rerunning a plan
    rewrites the same file names and the same result.
    """
    started_ms = int(time.time() * 1000)
    clock = time.perf_counter()
    documents = DocumentStore(s3)
    try:
        plan = RunPlan.model_validate_json(documents.read_bytes(plan_uri))
    except (KafscaleIcebergError, ValidationError, UnicodeDecodeError) as exc:
        return _fail_unreadable_plan(documents, plan_uri, exc, started_ms, clock, session_start_s)
    settings = _storage_settings(plan, s3)
    if settings != (s3 or S3Settings()):
        documents = DocumentStore(settings)
    logger.info(
        "run started: run_id=%s topic=%s partitions=%d segments=%d bytes=%d",
        plan.run_id,
        plan.topic,
        len(plan.partitions),
        plan.segment_count,
        plan.total_bytes,
    )
    try:
        result = _run_checked(
            plan,
            executor,
            settings,
            sizing or TaskSizing(),
            started_ms,
            clock,
            session_start_s,
            registry_credentials,
        )
    except _InvalidPlanError as exc:
        result = failed_result(
            plan.run_id,
            plan.topic,
            RunFailure(kind=FailureKind.INVALID_PLAN, message=str(exc)),
            _timings(started_ms, clock, session_start_s),
        )
    except Exception as exc:  # the job boundary: any error becomes a typed, written failure
        logger.exception("run failed: run_id=%s", plan.run_id)
        result = failed_result(
            plan.run_id,
            plan.topic,
            RunFailure(kind=FailureKind.INTERNAL, message=_describe(exc)),
            _timings(started_ms, clock, session_start_s),
        )
    result = result.model_copy(
        update={"timings": _timings(started_ms, clock, session_start_s, result.timings)}
    )
    documents.write_text(plan.result_uri, result.model_dump_json(indent=2))
    logger.info(
        "run finished: run_id=%s status=%s files=%d dead_letter_files=%d tables=%d written=%d "
        "dead_lettered=%d %s",
        plan.run_id,
        result.status.value,
        len(result.data_files),
        len(result.dead_letter_files),
        len(result.tables),
        result.counts.written,
        result.counts.dead_lettered,
        f"failure={result.failure.kind.value}: {result.failure.message}" if result.failure else "",
    )
    return result


def _run_checked(
    plan: RunPlan,
    executor: TaskExecutor,
    settings: S3Settings,
    sizing: TaskSizing,
    started_ms: int,
    clock: float,
    session_start_s: float,
    registry_credentials: RegistryCredentials | None = None,
) -> RunResult:
    """The run's stages (raises `_InvalidPlanError` for a plan that cannot run, else a task's error)."""
    _check_plan(plan)
    credentials = registry_credentials_for(plan, registry_credentials)
    cores = executor.parallelism
    tasks = plan_tasks(
        plan,
        max_tasks=sizing.max_tasks or TASKS_PER_CORE * cores,
        min_task_bytes=sizing.min_task_bytes,
        max_task_bytes=sizing.max_task_bytes,
        multiple_of=cores,
    )
    reports: list[TaskReport] = []
    observe_s = 0.0
    if plan.infers:
        observing = time.perf_counter()
        if tasks:
            observer = ObservationRunner(
                plan_json=plan.model_dump_json(),
                tasks=tasks,
                s3=settings,
                prefetch=sizing.prefetch,
                registry_credentials=credentials,
            )
            plan, observe_s = observe_columns(executor, observer)
        _check_plan(plan)
        logger.info(
            "columns inferred: run_id=%s columns=%s seconds=%.3f",
            plan.run_id,
            "; ".join(_inferred_columns_text(plan)),
            time.perf_counter() - observing,
        )
    if tasks:
        runner = TaskRunner(
            plan_json=plan.model_dump_json(),
            tasks=tasks,
            s3=settings,
            prefetch=sizing.prefetch,
            registry_credentials=credentials,
        )
        reports = run_tasks(executor, runner)
    result = build_run_result(plan, reports, _timings(started_ms, clock, session_start_s))
    if plan.conversion.upsert is not None and result.failure is None:
        result = run_upsert_stage(
            plan, result, executor, settings, max_tasks=sizing.max_tasks or TASKS_PER_CORE * cores
        )
    if plan.infers and result.failure is None:
        result = with_written_columns(plan, result).model_copy(
            update={"timings": result.timings.model_copy(update={"task_observe_s": observe_s})}
        )
    return result


class _InvalidPlanError(ValueError):
    """The plan is well-formed JSON but cannot be run as it is (retrying it cannot help)."""


def _check_plan(plan: RunPlan) -> None:
    if any(m.conversion.reads_registry for m in plan.mappings) and plan.schema_registry is None:
        raise _InvalidPlanError(
            f"plan {plan.run_id}: a registered value_format or key_format needs the plan's schema_registry"
        )
    try:
        for mapping in plan.mappings:
            fields = table_fields(mapping.conversion.table_columns)
            check_partitioning(fields, mapping.conversion.partition_by)
            converter = RecordConverter(topic=plan.topic, run_id=plan.run_id, settings=mapping.conversion)
            for target, role in mapping.static_targets():
                schema = DEAD_LETTER_SCHEMA if role is TableRole.DEAD_LETTER else converter.schema
                if role is TableRole.DATA and target.columns is not None:  # a routed inferred table
                    schema = data_schema(mapping.conversion_for(target).table_columns)
                with_field_ids(schema, target.field_ids, table=target.identifier)
    except (PartitioningError, InvalidJsonSchemaError, ValueError) as exc:
        raise _InvalidPlanError(f"plan {plan.run_id}: {exc}") from exc


def with_written_columns(plan: RunPlan, result: RunResult) -> RunResult:
    """`result` with the columns and field ids of each inferred table as `plan` (the one the conversion
    stage ran) wrote its files: `RunResult.columns` for a run of one table, else on each inferred
    table's `TableOutput`."""
    if not plan.multi_table:
        if not plan.conversion.infer_columns:
            return result
        return result.model_copy(
            update={
                "columns": plan.conversion.columns,
                "field_ids": plan.table.field_ids if plan.table is not None else None,
            }
        )
    outputs = []
    for output in result.tables:
        mapping = plan.mappings[output.mapping] if output.mapping < len(plan.mappings) else None
        target = None if mapping is None else mapping.target(output.identifier)
        if mapping is None or target is None or output.role is not TableRole.DATA:
            outputs.append(output)
            continue
        if not mapping.conversion.infer_columns:
            outputs.append(output)
            continue
        written = mapping.conversion_for(target)
        outputs.append(output.model_copy(update={"columns": written.columns, "field_ids": target.field_ids}))
    return result.model_copy(update={"tables": tuple(outputs)})


def _inferred_columns_text(plan: RunPlan) -> list[str]:
    """Per inferred table `table: name type, ...` (for the log)."""
    texts = []
    for mapping in plan.mappings:
        if not mapping.conversion.infer_columns:
            continue
        targets = [t for t, role in mapping.static_targets() if role is TableRole.DATA]
        if mapping.route is not None:
            targets += [mapping.route.template_target(i) for i in sorted(mapping.route.known_columns)]
        for target in targets:
            columns = mapping.conversion_for(target).columns
            texts.append(f"{target.identifier}: " + ", ".join(f"{c.name} {c.type_name}" for c in columns))
    return texts


def _storage_settings(plan: RunPlan, s3: S3Settings | None) -> S3Settings:
    source = plan.source
    if source.bucket is not None:
        return S3Settings(
            endpoint_url=source.endpoint_url, region=source.region, path_style=source.path_style
        )
    return s3 or S3Settings()


def _timings(
    started_ms: int, clock: float, session_start_s: float, base: RunTimings | None = None
) -> RunTimings:
    update = {
        "started_at_ms": started_ms,
        "ended_at_ms": int(time.time() * 1000),
        "session_start_s": session_start_s,
        "process_s": time.perf_counter() - clock,
    }
    if base is None:
        return RunTimings.model_validate(update)
    return base.model_copy(update=update)


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE // 2] + " ... " + text[-_MAX_MESSAGE // 2 :]
    return text


def _fail_unreadable_plan(
    documents: DocumentStore,
    plan_uri: str,
    exc: BaseException,
    started_ms: int,
    clock: float,
    session_start_s: float,
) -> RunResult:
    """A plan that cannot be read still gets a failed result beside it, if its path names the run."""
    # Unreadable (missing, S3 down) is not the plan's fault; malformed JSON or an unknown version is.
    kind = FailureKind.INTERNAL if isinstance(exc, KafscaleIcebergError) else FailureKind.INVALID_PLAN
    message = f"plan {plan_uri} could not be read: {_describe(exc)}"
    logger.error("%s", message)
    topic, run_id = _run_of_plan_uri(plan_uri)
    result = failed_result(
        run_id or "unknown-run",
        topic or "unknown-topic",
        RunFailure(kind=kind, message=message),
        _timings(started_ms, clock, session_start_s),
    )
    if topic and run_id:
        try:
            documents.write_text(_result_uri_beside(plan_uri), result.model_dump_json(indent=2))
        except KafscaleIcebergError:
            logger.error("could not write the failed result beside %s:\n%s", plan_uri, traceback.format_exc())
    return result


def _run_of_plan_uri(plan_uri: str) -> tuple[str | None, str | None]:
    """`(topic, run_id)` from `.../{topic}/{run_id}/plan.json`, else Nones."""
    parts = PurePosixPath(urlparse(plan_uri).path).parts
    if len(parts) < 3:
        return None, None
    try:
        return parts[-3], validate_run_id(parts[-2])
    except ValueError:
        return None, None


def _result_uri_beside(plan_uri: str) -> str:
    base = plan_uri.rsplit("/", 1)[0] if "/" in plan_uri else "."
    return join_uri(base, "result.json")
