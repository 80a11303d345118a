"""The composition root: builds each service's dependencies from a validated config, once per process.

Imports of SDKs happen inside the builders, so a Lambda that only routes never loads etcd3, and
nothing but the commit step loads pyiceberg or pyarrow.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, S3Settings, make_s3_client
from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.domain.runner_choice import RunnerKind, RunnerLineup
from kafscale_iceberg.exceptions import ConfigError, TableMissingError

if TYPE_CHECKING:
    from kafscale_iceberg.adapters.emr_serverless import EmrServerlessJobRunner
    from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore
    from kafscale_iceberg.adapters.http_registry import HttpSchemaRegistry
    from kafscale_iceberg.adapters.iceberg_maintenance import IcebergTableMaintainer
    from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
    from kafscale_iceberg.adapters.sqs_queues import SqsReceiver, SqsRedelivery, SqsWorkQueue
    from kafscale_iceberg.adapters.step_functions import StepFunctionsRunStarter
    from kafscale_iceberg.domain.checkpoint_wire import StoreScope
    from kafscale_iceberg.domain.leases import LeaseGrant
    from kafscale_iceberg.domain.runs import RunPlan, RunResult
    from kafscale_iceberg.execution.job_runner import ChosenJobRunner, InProcessJobRunner
    from kafscale_iceberg.ports import (
        CheckpointStore,
        CompactionJobRunner,
        JobRunner,
        MetadataSource,
        RunStarter,
        RunTracker,
        TopicSignaller,
        WorkQueue,
    )
    from kafscale_iceberg.services.commits.commit import CommitService
    from kafscale_iceberg.services.commits.run_writes import TablePolicy
    from kafscale_iceberg.services.compaction_trigger import MaintenanceTrigger
    from kafscale_iceberg.services.discovery import TopicDiscovery
    from kafscale_iceberg.services.launch import Launcher
    from kafscale_iceberg.services.maintenance import MaintenanceService
    from kafscale_iceberg.services.offset_reset import OffsetReset
    from kafscale_iceberg.services.reconcile import Reconciler
    from kafscale_iceberg.services.redrive import RedriveService
    from kafscale_iceberg.services.replay import ReplayService
    from kafscale_iceberg.services.route import Router
    from kafscale_iceberg.services.run_steps import RunSteps

logger = logging.getLogger(__name__)

STATE_MACHINE_ENV = "KAFSCALE_ICEBERG_STATE_MACHINE_ARN"
MAINTENANCE_FUNCTION_ENV = "KAFSCALE_ICEBERG_MAINTENANCE_FUNCTION_ARN"


def default_owner_id() -> str:
    """Who holds a lease: the Lambda function and its log stream, or this host and process."""
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    if function:
        return f"{function}/{os.environ.get('AWS_LAMBDA_LOG_STREAM_NAME', '?')}"
    return f"{socket.gethostname()}/{os.getpid()}"


class Assembly:
    """Lazily built, cached dependencies for one config (one per process)."""

    def __init__(self, config: KafscaleConfig, *, owner_id: str | None = None) -> None:
        self.config = config
        self.owner_id = owner_id or default_owner_id()

    @cached_property
    def s3_settings(self) -> S3Settings:
        s3 = self.config.s3
        return S3Settings(
            endpoint_url=s3.endpoint or None, region=s3.region or None, path_style=s3.path_style
        )

    @cached_property
    def segments(self) -> S3SegmentStore:
        return S3SegmentStore(
            make_s3_client(self.s3_settings), self.config.s3.bucket, self.config.s3.namespace
        )

    @cached_property
    def documents(self) -> DocumentStore:
        return DocumentStore(self.s3_settings)

    @cached_property
    def checkpoints(self) -> CheckpointStore:
        offsets = self.config.offsets
        if offsets.backend == "sqlite":
            from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore  # noqa: PLC0415

            return SqliteCheckpointStore(
                offsets.sqlite_path,
                key_prefix=offsets.key_prefix,
                lease_ttl_seconds=offsets.lease_ttl_seconds,
            )
        if offsets.checkpoint_function:
            from kafscale_iceberg.adapters.lambda_checkpoints import LambdaCheckpointStore  # noqa: PLC0415
            from kafscale_iceberg.domain.checkpoint_wire import StoreScope  # noqa: PLC0415

            scope = StoreScope(
                key_prefix=offsets.key_prefix,
                lease_ttl_seconds=offsets.lease_ttl_seconds,
                endpoints=tuple(self.config.etcd.endpoints),
            )
            return LambdaCheckpointStore(offsets.checkpoint_function, scope)
        return self._etcd_store(lease_ttl_seconds=offsets.lease_ttl_seconds)

    def _etcd_store(self, *, lease_ttl_seconds: int = 30) -> EtcdCheckpointStore:
        """A store on the configured etcd: endpoints, credentials, TLS, key prefix."""
        from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore  # noqa: PLC0415

        etcd = self.config.etcd
        return EtcdCheckpointStore(
            list(etcd.endpoints),
            key_prefix=self.config.offsets.key_prefix,
            username=etcd.username or None,
            password=etcd.password.get_secret_value() or None,
            ca_cert_path=etcd.tls.ca_file or None,
            client_cert_path=etcd.tls.cert_file or None,
            client_key_path=etcd.tls.key_file or None,
            lease_ttl_seconds=lease_ttl_seconds,
        )

    @cached_property
    def registry(self) -> HttpSchemaRegistry | None:
        registry = self.config.schema_.registry
        if not registry.base_url:
            return None
        from kafscale_iceberg.adapters.http_registry import HttpSchemaRegistry  # noqa: PLC0415

        return HttpSchemaRegistry(
            registry.base_url, timeout_seconds=registry.timeout_seconds, cache_seconds=registry.cache_seconds
        )

    @cached_property
    def emr_runner(self) -> EmrServerlessJobRunner:
        from kafscale_iceberg.adapters.emr_serverless import (  # noqa: PLC0415
            EmrServerlessJobRunner,
            make_emr_serverless_client,
        )

        emr = self.config.runner.emr_serverless
        return EmrServerlessJobRunner(
            emr,
            make_emr_serverless_client(emr.region or self.config.s3.region or None),
            timeout_minutes=self.config.runs.timeout_minutes,
        )

    @cached_property
    def metadata_source(self) -> MetadataSource | None:
        """KafScale's metadata snapshot in etcd (discovery's filter); None without etcd endpoints."""
        if self.config.offsets.backend == "etcd":
            return self.checkpoints
        if not self.config.etcd.endpoints:
            return None
        return self._etcd_store()

    @cached_property
    def discovery(self) -> TopicDiscovery:
        """Topics and partitions to look at, per `discovery.mode`."""
        from kafscale_iceberg.services.discovery import TopicDiscovery  # noqa: PLC0415

        return TopicDiscovery(
            self.config.discovery.mode, self.config.mapped_topics, self.segments, self.metadata_source
        )

    @cached_property
    def work_queue(self) -> SqsWorkQueue:
        """The FIFO work queue (`notifications.work_queue_url`): work items and topic signals."""
        import boto3  # noqa: PLC0415

        from kafscale_iceberg.adapters.sqs_queues import SqsWorkQueue  # noqa: PLC0415

        url = self.config.notifications.work_queue_url
        if not url:
            raise ConfigError("notifications.work_queue_url", "is required here: the FIFO work queue URL")
        return SqsWorkQueue(boto3.client("sqs", region_name=self.config.s3.region or None), url)

    @cached_property
    def sqs_redelivery(self) -> SqsRedelivery:
        """Shortens a received message's visibility (the router's `.kfs` before its `.index`)."""
        import boto3  # noqa: PLC0415

        from kafscale_iceberg.adapters.sqs_queues import SqsRedelivery  # noqa: PLC0415

        return SqsRedelivery(boto3.client("sqs", region_name=self.config.s3.region or None))

    def make_router(self, work_queue: WorkQueue) -> Router:
        """A router over the config's bucket and mappings, enqueueing on `work_queue`."""
        from kafscale_iceberg.services.route import Router, RouterSettings  # noqa: PLC0415

        mapped = self.config.mapped_topics
        return Router(
            RouterSettings(
                bucket=self.config.s3.bucket,
                namespace=self.config.s3.namespace,
                is_mapped=mapped.__contains__,
            ),
            self.segments,
            work_queue,
        )

    @cached_property
    def router(self) -> Router:
        """The AWS router: work items go to the FIFO work queue."""
        return self.make_router(self.work_queue)

    def make_notification_receiver(self, url: str) -> SqsReceiver:
        """Receives S3 notifications from the queue at `url` (the one-machine loop's signal path)."""
        import boto3  # noqa: PLC0415

        from kafscale_iceberg.adapters.sqs_queues import SqsReceiver  # noqa: PLC0415

        settings = self.s3_settings
        client = boto3.client("sqs", endpoint_url=settings.endpoint_url, region_name=settings.region)
        return SqsReceiver(client, url)

    @cached_property
    def step_functions(self) -> StepFunctionsRunStarter:
        """Runs go to the state machine named by `KAFSCALE_ICEBERG_STATE_MACHINE_ARN`."""
        import boto3  # noqa: PLC0415

        from kafscale_iceberg.adapters.step_functions import StepFunctionsRunStarter  # noqa: PLC0415

        arn = os.environ.get(STATE_MACHINE_ENV, "")
        if not arn:
            raise ConfigError(
                STATE_MACHINE_ENV, "environment variable is not set: the run state machine's ARN"
            )
        return StepFunctionsRunStarter(
            boto3.client("stepfunctions", region_name=self.config.s3.region or None), arn
        )

    def make_launcher(self, starter: RunStarter, *, repair_from_table: bool = False) -> Launcher:
        """A launcher handing its runs to `starter`; `repair_from_table` (one machine: pyiceberg is
        loaded anyway) has it set the checkpoint store to the table's offsets, and `field-ids.json`
        to the upsert tables' current versions, before each plan is made."""
        from kafscale_iceberg.services.launch import Launcher  # noqa: PLC0415

        return Launcher(
            self.config,
            self.checkpoints,
            self.segments,
            self.documents,
            starter,
            owner_id=self.owner_id,
            registry=self.registry,
            partition_filter=self.discovery.partitions if self.metadata_source is not None else None,
            repair_from_table=self._repair_from_table if repair_from_table else None,
        )

    def _repair_from_table(self, topic: str, grant: LeaseGrant) -> None:
        """Set `topic`'s checkpoint-store offsets to its table's markers (fenced by `grant`) and the
        upsert tables' recorded versions to their current ones."""
        anchor = self.config.anchor_table(topic)
        if anchor is not None:
            self.commits.reconciled_offsets(topic, anchor, lease=grant)
        upsert = [m.table for m in self.config.mappings_for(topic) if m.table and m.upsert is not None]
        if upsert:
            self._repair_versions(topic, upsert)

    def _repair_versions(self, topic: str, tables: list[str]) -> None:
        from kafscale_iceberg.services.field_id_records import FieldIdRecords  # noqa: PLC0415

        current: dict[str, str] = {}
        for table in tables:
            try:
                version = self.tables.read_state(table, topic).version
            except TableMissingError:
                continue
            if version is not None:
                current[table] = version
        moved = FieldIdRecords(self.documents, self.config.runs.location).repair_versions(topic, current)
        if moved:
            logger.info(
                "topic %s: the recorded version of %s caught up with the table (it moved since the "
                "last commit recorded it); the run locates its keys in the current one",
                topic,
                ", ".join(sorted(moved)),
                extra={"topic": topic, "tables": sorted(moved)},
            )

    @cached_property
    def launcher(self) -> Launcher:
        """The AWS launcher: runs go to the state machine."""
        return self.make_launcher(self.step_functions)

    def make_reconciler(self, signaller: TopicSignaller, runs: RunTracker | None) -> Reconciler:
        """A reconciler signalling through `signaller`, asking `runs` whether a lease holder still runs."""
        from kafscale_iceberg.services.reconcile import Reconciler  # noqa: PLC0415

        return Reconciler(
            self.checkpoints,
            self.segments,
            self.discovery,
            signaller,
            runs=runs,
            lease_ttl_seconds=self.config.offsets.lease_ttl_seconds,
        )

    @cached_property
    def reconciler(self) -> Reconciler:
        """The AWS reconciler: signals on the work queue, runs tracked by Step Functions."""
        return self.make_reconciler(self.work_queue, self.step_functions)

    @cached_property
    def tables(self) -> IcebergTableCommitter:
        """The configured catalog's tables (imports pyiceberg and pyarrow)."""
        from kafscale_iceberg.adapters.iceberg_catalog import (  # noqa: PLC0415
            CatalogSettings,
            load_iceberg_catalog,
        )
        from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter  # noqa: PLC0415

        catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        return IcebergTableCommitter(catalog)

    @cached_property
    def redrive(self) -> RedriveService:
        """Dead letters re-driven (`redrive`) on the configured catalog (imports pyiceberg and pyarrow)."""
        from kafscale_iceberg.adapters.iceberg_catalog import (  # noqa: PLC0415
            CatalogSettings,
            load_iceberg_catalog,
        )
        from kafscale_iceberg.adapters.iceberg_dead_letters import IcebergDeadLetters  # noqa: PLC0415
        from kafscale_iceberg.dataplane.redrive import convert_dead_letters  # noqa: PLC0415
        from kafscale_iceberg.services.redrive import RedriveService  # noqa: PLC0415

        settings = CatalogSettings.from_config(self.config)
        dead_letters = IcebergDeadLetters(load_iceberg_catalog(settings), describe=settings.describe())
        return RedriveService(
            self.config,
            self.checkpoints,
            dead_letters,
            convert_dead_letters,
            self.tables,
            owner_id=self.owner_id,
        )

    @cached_property
    def commits(self) -> CommitService:
        """The commit step over the configured catalog (imports pyiceberg and pyarrow)."""
        from kafscale_iceberg.services.commits.commit import CommitService  # noqa: PLC0415

        return CommitService(self.tables, self.checkpoints, stranded_runs=self._run_documents)

    def _table_data_prefix(self, table: str) -> str | None:
        """The product's folder in `table`'s data location (run folders; where orphan cleanup looks);
        None when the table does not exist."""
        from kafscale_iceberg.domain.table_locations import kafscale_data_prefix  # noqa: PLC0415

        try:
            known = self.tables.field_ids(table)
        except TableMissingError:
            return None
        return kafscale_data_prefix(known.data_location) if known.data_location else None

    @cached_property
    def offset_reset(self) -> OffsetReset:
        """Offset resets (`replay --reset-offsets`) on the configured catalog (imports pyiceberg)."""
        from kafscale_iceberg.services.offset_reset import OffsetReset  # noqa: PLC0415

        return OffsetReset(self.tables, self.checkpoints, rewrite_prefix=self._table_data_prefix)

    def _run_documents(self, topic: str, run_id: str) -> tuple[RunPlan, RunResult] | None:
        """A run's plan and result from `runs.location`; None when either is missing."""
        from kafscale_iceberg.domain.runs import RunPlan, RunResult  # noqa: PLC0415
        from kafscale_iceberg.domain.tickets import PLAN_NAME, run_document_uri  # noqa: PLC0415
        from kafscale_iceberg.exceptions import DocumentMissingError  # noqa: PLC0415

        try:
            plan_uri = run_document_uri(self.config.runs.location, topic, run_id, PLAN_NAME)
            plan = RunPlan.model_validate_json(self.documents.read_text(plan_uri))
            return plan, RunResult.model_validate_json(self.documents.read_text(plan.result_uri))
        except DocumentMissingError:
            return None

    @cached_property
    def replay(self) -> ReplayService:
        """Replay (and reset) of quarantined or committed ranges; enqueues on the work queue when one is
        configured (imports pyiceberg and pyarrow: it reads and may rewrite the tables)."""
        from kafscale_iceberg.services.replay import ReplayService  # noqa: PLC0415

        return ReplayService(
            self.config,
            self.segments,
            self.checkpoints,
            self.commits,
            self.offset_reset,
            self.work_queue if self.config.notifications.work_queue_url else None,
            owner_id=self.owner_id,
            tables_of=self.tables_of,
        )

    def tables_of(self, topic: str) -> tuple[str, ...]:
        """Every table `topic` is written to: the config's, and those a route's template created
        (listed in the catalog; imports pyiceberg)."""
        from kafscale_iceberg.services.topic_tables import topic_tables  # noqa: PLC0415

        return topic_tables(self.config, topic, self.tables, self.tables)

    @cached_property
    def table_maintainer(self) -> IcebergTableMaintainer:
        """Maintenance operations on the configured catalog's tables (imports pyiceberg)."""
        from kafscale_iceberg.adapters.data_files import StagedFileStore  # noqa: PLC0415
        from kafscale_iceberg.adapters.iceberg_catalog import (  # noqa: PLC0415
            CatalogSettings,
            load_iceberg_catalog,
        )
        from kafscale_iceberg.adapters.iceberg_maintenance import IcebergTableMaintainer  # noqa: PLC0415

        catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        return IcebergTableMaintainer(
            catalog, StagedFileStore(self.s3_settings), managed_compaction=self._s3_tables_compaction()
        )

    def _s3_tables_compaction(self) -> Callable[[str], bool] | None:
        """With an Amazon S3 Tables warehouse, whether S3 Tables compacts a table itself; else None."""
        from kafscale_iceberg.config.sections import S3_TABLES_ARN  # noqa: PLC0415

        table_bucket = S3_TABLES_ARN.fullmatch(self.config.iceberg.warehouse)
        if table_bucket is None:
            return None
        import boto3  # noqa: PLC0415

        from kafscale_iceberg.adapters.s3tables_maintenance import S3TablesCompactionProbe  # noqa: PLC0415

        client = boto3.session.Session().client(
            "s3tables",
            region_name=table_bucket["region"],
            endpoint_url=self.config.s3.endpoint or None,
        )
        return S3TablesCompactionProbe(table_bucket.string, client).compacts

    @cached_property
    def maintenance(self) -> MaintenanceService:
        """Compaction, snapshot expiry and orphan cleanup of the mapped tables (imports pyiceberg).

        Compaction is a Spark job on EMR Serverless when that is the runner and
        `maintenance.compaction_engine` is `spark`; in this process otherwise (one machine: see
        `make_maintenance`, which `run` and `maintain` give their local Spark runner)."""
        spark = self.config.maintenance.compaction_engine == "spark"
        emr = self.config.runner.type == "emr_serverless"
        return self.make_maintenance(self.emr_runner if spark and emr else None)

    @cached_property
    def maintenance_trigger(self) -> MaintenanceTrigger:
        """The small-file trigger of the commit function: a topic whose table gathered
        `maintenance.trigger_small_files` new files gets a maintenance pass now (an asynchronous
        invoke of the function in `KAFSCALE_ICEBERG_MAINTENANCE_FUNCTION_ARN`; unset: never)."""
        from kafscale_iceberg.adapters.lambda_invoke import AsyncLambdaInvoker  # noqa: PLC0415
        from kafscale_iceberg.services.compaction_trigger import (  # noqa: PLC0415
            MaintenanceTrigger,
            SmallFileTrigger,
        )

        arn = os.environ.get(MAINTENANCE_FUNCTION_ENV, "")
        invoker = AsyncLambdaInvoker(arn) if arn else None

        def start(topic: str) -> None:
            if invoker is not None:
                invoker.invoke({"topics": [topic], "reason": "small files"})

        return MaintenanceTrigger(SmallFileTrigger(self.config), start)

    def make_maintenance(self, jobs: CompactionJobRunner | None) -> MaintenanceService:
        """The maintenance service; with `jobs`, compaction runs as Spark jobs on that runner."""
        from kafscale_iceberg.adapters.file_listing import StorageFileLister  # noqa: PLC0415
        from kafscale_iceberg.adapters.iceberg_maintenance import new_compaction_id  # noqa: PLC0415
        from kafscale_iceberg.services.compaction_jobs import SparkCompaction  # noqa: PLC0415
        from kafscale_iceberg.services.maintenance import MaintenanceService  # noqa: PLC0415

        spark = (
            SparkCompaction(
                self.config, self.table_maintainer, jobs, self.documents, new_job_id=new_compaction_id
            )
            if jobs is not None
            else None
        )
        return MaintenanceService(
            self.config,
            self.table_maintainer,
            StorageFileLister(self.s3_settings),
            self.checkpoints,
            self.documents,
            spark=spark,
            tables_of=self.tables_of,
        )

    def table_policy(self, topic: str) -> TablePolicy:
        """What the commit step may do to `topic`'s table, from its mapping."""
        from kafscale_iceberg.services.commits.run_writes import TablePolicy  # noqa: PLC0415

        mappings = self.config.mappings_for(topic)
        return TablePolicy.from_mapping(*mappings) if mappings else TablePolicy()

    @cached_property
    def in_process_runner(self) -> InProcessJobRunner:
        """Runs plans in this process (the Lambda runner; `execution/job_runner.py`)."""
        from kafscale_iceberg.execution.job_runner import InProcessJobRunner  # noqa: PLC0415

        return InProcessJobRunner(s3=self.s3_settings, traits=self.runner_lineup.traits(RunnerKind.LAMBDA))

    @cached_property
    def runner_lineup(self) -> RunnerLineup:
        """The runners a run may go to, in the order the launcher tries them (`domain/runner_choice.py`)."""
        runner = self.config.runner
        return RunnerLineup.configured(runner.type, runner.lambda_.max_bytes)

    @cached_property
    def aws_runners(self) -> ChosenJobRunner:
        """The runners the state machine runs a plan on (the Lambda runner, EMR Serverless), each
        asked for its own step request; builds no task executor."""
        from kafscale_iceberg.execution.job_runner import ChosenJobRunner  # noqa: PLC0415

        return ChosenJobRunner([self.in_process_runner, self.emr_runner])

    def run_steps(self) -> RunSteps:
        """The run steps on EMR Serverless (the catalog is loaded by the commit step only)."""
        return self.make_run_steps(self.emr_runner)

    def make_run_steps(self, jobs: JobRunner) -> RunSteps:
        """The run steps over `jobs` (EMR Serverless, or local Spark)."""
        from kafscale_iceberg.services.run_steps import RunSteps  # noqa: PLC0415

        return RunSteps(
            self.config.runs,
            self.checkpoints,
            jobs,
            self.documents,
            commits=lambda: self.commits,
            mapping_policy=self.table_policy,
            runners=self.runner_lineup,
        )


class CheckpointGatewayStores:
    """The checkpoint function's etcd stores (`functions/checkpoints.py`): one per caller scope (key
    prefix, lease TTL), built from the function's environment (`config.etcd_from_environment`) and
    connected once per process."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = dict(environ)
        self._stores: dict[StoreScope, CheckpointStore] = {}

    def __call__(self, scope: StoreScope) -> CheckpointStore:
        """The store of `scope`. Raises `ConfigError` when no etcd endpoint is known."""
        store = self._stores.get(scope)
        if store is None:
            from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore  # noqa: PLC0415
            from kafscale_iceberg.config.deployment import etcd_from_environment  # noqa: PLC0415

            etcd = etcd_from_environment(self._environ, endpoints=scope.endpoints)
            store = EtcdCheckpointStore(
                list(etcd.endpoints),
                key_prefix=scope.key_prefix,
                username=etcd.username or None,
                password=etcd.password.get_secret_value() or None,
                ca_cert_path=etcd.tls.ca_file or None,
                client_cert_path=etcd.tls.cert_file or None,
                client_key_path=etcd.tls.key_file or None,
                lease_ttl_seconds=scope.lease_ttl_seconds,
            )
            self._stores[scope] = store
        return store
