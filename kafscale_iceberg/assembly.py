"""The composition root: builds each service's dependencies from a validated config, once per process.

Imports of SDKs happen inside the builders, so a Lambda that only routes never loads etcd3, and
nothing but the commit step loads pyiceberg or pyarrow.
"""

from __future__ import annotations

import os
import socket
from functools import cached_property
from typing import TYPE_CHECKING

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, S3Settings, make_s3_client
from kafscale_iceberg.config import KafscaleConfig, parse_config
from kafscale_iceberg.exceptions import ConfigError

if TYPE_CHECKING:
    from kafscale_iceberg.adapters.emr_serverless import EmrServerlessJobRunner
    from kafscale_iceberg.adapters.http_registry import HttpSchemaRegistry
    from kafscale_iceberg.ports import CheckpointStore
    from kafscale_iceberg.services.commit import CommitService, TablePolicy
    from kafscale_iceberg.services.launch import Launcher
    from kafscale_iceberg.services.route import Router
    from kafscale_iceberg.services.run_steps import RunSteps

CONFIG_ENV = "KAFSCALE_ICEBERG_CONFIG"
STATE_MACHINE_ENV = "KAFSCALE_ICEBERG_STATE_MACHINE_ARN"


def load_config_from(location: str) -> KafscaleConfig:
    """Load and validate the config at a path, `file://` or `s3://` URI (S3 via the default chain)."""
    text = DocumentStore().read_text(location)
    return parse_config(text, source=location)


def config_from_environment() -> KafscaleConfig:
    """The config named by `KAFSCALE_ICEBERG_CONFIG` (what the Lambda functions use)."""
    location = os.environ.get(CONFIG_ENV, "")
    if not location:
        raise ConfigError(
            CONFIG_ENV, "environment variable is not set: point it at the config file (s3:// or path)"
        )
    return load_config_from(location)


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
        from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore  # noqa: PLC0415

        etcd = self.config.etcd
        return EtcdCheckpointStore(
            list(etcd.endpoints),
            key_prefix=offsets.key_prefix,
            lease_ttl_seconds=offsets.lease_ttl_seconds,
            username=etcd.username or None,
            password=etcd.password.get_secret_value() or None,
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
    def router(self) -> Router:
        import boto3  # noqa: PLC0415

        from kafscale_iceberg.adapters.sqs_queues import SqsWorkQueue  # noqa: PLC0415
        from kafscale_iceberg.services.route import Router, RouterSettings  # noqa: PLC0415

        work_queue_url = self.config.notifications.work_queue_url
        if not work_queue_url:
            raise ConfigError(
                "notifications.work_queue_url", "is required by the router: the FIFO work queue URL"
            )
        mapped = self.config.mapped_topics
        return Router(
            RouterSettings(
                bucket=self.config.s3.bucket,
                namespace=self.config.s3.namespace,
                is_mapped=mapped.__contains__,
            ),
            self.segments,
            SqsWorkQueue(boto3.client("sqs", region_name=self.config.s3.region or None), work_queue_url),
        )

    @cached_property
    def launcher(self) -> Launcher:
        """The AWS launcher: runs go to the state machine named by `KAFSCALE_ICEBERG_STATE_MACHINE_ARN`."""
        import boto3  # noqa: PLC0415

        from kafscale_iceberg.adapters.step_functions import StepFunctionsRunStarter  # noqa: PLC0415
        from kafscale_iceberg.services.launch import Launcher  # noqa: PLC0415

        arn = os.environ.get(STATE_MACHINE_ENV, "")
        if not arn:
            raise ConfigError(
                STATE_MACHINE_ENV, "environment variable is not set: the run state machine's ARN"
            )
        starter = StepFunctionsRunStarter(
            boto3.client("stepfunctions", region_name=self.config.s3.region or None), arn
        )
        return Launcher(
            self.config,
            self.checkpoints,
            self.segments,
            self.documents,
            starter,
            owner_id=self.owner_id,
            registry=self.registry,
        )

    @cached_property
    def commits(self) -> CommitService:
        """The commit step over the configured catalog (imports pyiceberg and pyarrow)."""
        from kafscale_iceberg.adapters.iceberg_catalog import (  # noqa: PLC0415
            CatalogSettings,
            load_iceberg_catalog,
        )
        from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter  # noqa: PLC0415
        from kafscale_iceberg.services.commit import CommitService  # noqa: PLC0415

        catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        return CommitService(IcebergTableCommitter(catalog), self.checkpoints)

    def table_policy(self, topic: str) -> TablePolicy:
        """What the commit step may do to `topic`'s table, from its mapping."""
        from kafscale_iceberg.services.commit import TablePolicy  # noqa: PLC0415

        mapping = self.config.mapping_for(topic)
        return TablePolicy() if mapping is None else TablePolicy.from_mapping(mapping)

    def run_steps(self, *, with_commits: bool) -> RunSteps:
        """The run steps on EMR Serverless; `with_commits` loads the catalog (the commit function only)."""
        from kafscale_iceberg.services.run_steps import RunSteps  # noqa: PLC0415

        return RunSteps(
            self.config.runs,
            self.checkpoints,
            self.emr_runner,
            self.documents,
            commits=self.commits if with_commits else None,
            mapping_policy=self.table_policy,
        )
