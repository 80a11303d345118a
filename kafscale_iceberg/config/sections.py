"""The top-level sections of the file: the Go processor's (`s3`, `iceberg`, `discovery`, `etcd`,
`offsets`, `processor`, `schema`) and this product's own (`runs`, `maintenance`, `runner`,
`notifications`). A mapping and its sub-sections are in `config.mappings`; the whole file, and the
rules across sections, in `config.model`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ByteSize,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from kafscale_iceberg.config.base import (
    DEFAULT_EMR_RELEASE_LABEL,
    DEFAULT_SQLITE_PATH,
    GIB,
    MIB,
    CatalogType,
    DiscoveryMode,
    OffsetsBackend,
    PositiveByteSize,
    RunnerType,
    StringMap,
    _catalog_type,
    _false_means_off,
    _invalid,
    _lowercase,
    _Problems,
    _s3_uri,
    _Section,
    _zero_means,
)
from kafscale_iceberg.domain.job_sizing import DEFAULT_MAX_VCPU
from kafscale_iceberg.domain.maintenance import DeleteFolding, TableHealth
from kafscale_iceberg.domain.runs import CorruptSegmentPolicy, SchemaMode, TimeColumns
from kafscale_iceberg.segments.keys import normalize_namespace

_EMR_PYTHON = "./environment/bin/python"
# The interpreter infra/emr/Dockerfile's image links (the one the package was installed for).
_EMR_IMAGE_PYTHON = "/usr/local/bin/kafscale-python"


def _vcpu_count(value: object) -> object:
    """EMR Serverless's capacity as template.yaml's `EmrMaximumCpu` gives it ("16 vCPU") or a number."""
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+)\s*(vcpu)?\s*", value, flags=re.IGNORECASE)
        if not match:
            raise _invalid(f"must be a vCPU count like 16 or '16 vCPU' (EmrMaximumCpu), got {value!r}")
        return int(match.group(1))
    return value


# --------------------------------------------------------------------------------------------------
# The Go processor's sections


class S3Config(_Section):
    """`s3`: the bucket and prefix KafScale brokers write segments to."""

    bucket: str
    namespace: str = ""
    endpoint: str = ""
    region: str = ""
    path_style: bool = False

    @field_validator("bucket")
    @classmethod
    def _bucket_is_a_name(cls, value: str) -> str:
        if value.startswith("s3://") or "/" in value:
            raise _invalid(
                f"must be a bucket name without s3:// or a path, got {value!r} "
                "(put the prefix in s3.namespace)"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _trim_namespace(cls, value: str) -> str:
        return normalize_namespace(value)

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str) -> str:
        if value and not re.match(r"https?://", value):
            raise _invalid(f"must be an http:// or https:// URL (e.g. http://localhost:9000), got {value!r}")
        return value

    @property
    def prefix(self) -> str:
        """The key prefix of every segment: `namespace/`, or "" for the bucket root."""
        return f"{self.namespace}/" if self.namespace else ""


def _redact(uri: str) -> str:
    """The URI with the password of its user-info masked: `postgresql://u:***@host/db`."""
    return re.sub(r"(//[^/:@]*:)[^/@]*@", r"\1***@", uri)


class CatalogConfig(_Section):
    """`iceberg.catalog`: which Iceberg catalog holds the tables."""

    type: Annotated[CatalogType, BeforeValidator(_catalog_type)]
    # Out of repr: an SQLAlchemy URL can carry a password (postgresql://user:secret@host/db).
    uri: str = Field(default="", repr=False)
    token: SecretStr = SecretStr("")
    username: str = ""
    password: SecretStr = SecretStr("")
    name: str = "kafscale"
    properties: StringMap = Field(default_factory=dict, repr=False)
    sigv4: bool = False
    """REST: sign every request with AWS SigV4 (Amazon S3 Tables' and Glue's Iceberg endpoints)."""
    signing_name: str = ""
    """REST with SigV4: the service name signed for (`s3tables`, `glue`; default from the URI/warehouse)."""
    signing_region: str = ""
    """REST with SigV4: the region signed for (default: the warehouse ARN's, else `s3.region`)."""
    oauth2_server_uri: str = ""
    """REST with `username`/`password`: where the OAuth2 token is fetched (`{uri}/v1/oauth/tokens`)."""
    scope: str = ""
    """REST with `username`/`password`: the OAuth2 scope asked for (default pyiceberg's, `catalog`)."""

    @model_validator(mode="after")
    def _check_per_type(self) -> CatalogConfig:
        problems = _Problems()
        self._check_rest_auth(problems)
        if self.type in {"rest", "sql"} and not self.uri:
            example = "https://catalog.example.com" if self.type == "rest" else "sqlite:///var/lib/catalog.db"
            problems.add("uri", f"is required when type is {self.type!r} (e.g. {example})")
        elif self.type == "rest" and not re.match(r"https?://", self.uri):
            problems.add(
                "uri", f"must be an http:// or https:// URL for a rest catalog, got {_redact(self.uri)!r}"
            )
        elif self.type == "sql" and "://" not in self.uri:
            problems.add(
                "uri",
                "must be an SQLAlchemy URL for a sql catalog (e.g. sqlite:///catalog.db), "
                f"got {_redact(self.uri)!r}",
            )
        if self.type == "rest" and self.username and not self.password.get_secret_value():
            problems.add(
                "password", "is required when username is set (the REST credential is username:password)"
            )
        problems.raise_if_any()
        return self

    def _check_rest_auth(self, problems: _Problems) -> None:
        """SigV4 or OAuth2 (token, client credentials) for a REST catalog; REST-only keys only with `rest`."""
        # A token and a client credential go together (pyiceberg refreshes the token with the
        # credential); SigV4 replaces both.
        bearer = [
            name
            for name, given in (("token", self.token.get_secret_value()), ("username", self.username))
            if given
        ]
        if self.sigv4 and bearer:
            problems.add(
                "sigv4",
                f"cannot be combined with {bearer[0]}: choose one way to authenticate to the catalog "
                "(token and/or username/password: OAuth2; sigv4: AWS SigV4 with the role's credentials)",
            )
        rest_only = {
            "sigv4": self.sigv4,
            "signing_name": self.signing_name,
            "signing_region": self.signing_region,
            "oauth2_server_uri": self.oauth2_server_uri,
            "scope": self.scope,
        }
        for key, value in rest_only.items():
            if value and self.type != "rest":
                problems.add(key, f"applies to a rest catalog only (type is {self.type!r})")
        for key in ("signing_name", "signing_region"):
            if rest_only[key] and not self.sigv4 and self.type == "rest":
                problems.add(key, "applies only with sigv4: true")
        if self.oauth2_server_uri and not re.match(r"https?://", self.oauth2_server_uri):
            problems.add(
                "oauth2_server_uri", f"must be an http:// or https:// URL, got {self.oauth2_server_uri!r}"
            )


S3_TABLES_ARN = re.compile(
    r"arn:aws[a-z-]*:s3tables:(?P<region>[a-z0-9-]+):(?P<account>[^:]+):bucket/(?P<bucket>[a-z0-9-]+)"
)
"""An Amazon S3 Tables table bucket ARN (the warehouse of its Iceberg REST endpoint)."""


class IcebergConfig(_Section):
    """`iceberg`: the catalog and the warehouse location tables are created under."""

    catalog: CatalogConfig
    warehouse: str = ""

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        # An absent catalog is reported as its missing keys (iceberg.catalog.type), not as "catalog".
        data.setdefault("catalog", {})
        table_bucket = S3_TABLES_ARN.fullmatch(str(data.get("warehouse") or "").rstrip("/"))
        catalog = data["catalog"]
        if table_bucket and isinstance(catalog, Mapping) and catalog.get("type") in (None, "rest"):
            # Amazon S3 Tables: its Iceberg REST endpoint in the bucket's region, signed for `s3tables`.
            region = table_bucket["region"]
            data["catalog"] = {
                "type": "rest",
                "uri": f"https://s3tables.{region}.amazonaws.com/iceberg",
                "sigv4": True,
                "signing_name": "s3tables",
                "signing_region": region,
                **catalog,
            }
        return data

    @property
    def in_table_bucket(self) -> bool:
        """Whether the warehouse is an Amazon S3 Tables table bucket (its ARN)."""
        return S3_TABLES_ARN.fullmatch(self.warehouse) is not None

    @model_validator(mode="after")
    def _check_table_bucket(self) -> IcebergConfig:
        if not self.warehouse.startswith("arn:") or ":s3tables:" not in self.warehouse:
            return self
        problems = _Problems()
        if not S3_TABLES_ARN.fullmatch(self.warehouse):
            problems.add(
                "warehouse",
                f"{self.warehouse!r} is not an S3 Tables table bucket ARN "
                "(arn:aws:s3tables:REGION:ACCOUNT:bucket/NAME)",
            )
        elif self.catalog.type != "rest":
            problems.add(
                "catalog.type",
                "must be rest for an S3 Tables warehouse (its Iceberg REST endpoint), "
                f"got {self.catalog.type!r}",
            )
        elif not self.catalog.sigv4:
            problems.add(
                "catalog.sigv4",
                "must be true for an S3 Tables warehouse: its Iceberg REST endpoint takes AWS SigV4 only "
                "(signing_name s3tables)",
            )
        problems.raise_if_any()
        return self

    @field_validator("warehouse")
    @classmethod
    def _trim_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")


class DiscoveryConfig(_Section):
    """`discovery`: whether the etcd metadata snapshot filters the S3 listing."""

    mode: Annotated[DiscoveryMode, BeforeValidator(_lowercase)] = "auto"


class EtcdTlsConfig(_Section):
    """`etcd.tls`: TLS to etcd with a private CA and/or client certificates (PEM files).

    `ca_file` verifies `https://` endpoints (default: the system CA bundle); `cert_file` and
    `key_file` (together) authenticate this client to an etcd started with `--client-cert-auth`.
    In AWS the etcd secret may carry them as PEM text (`tls_ca`, `tls_cert`, `tls_key`).
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    @model_validator(mode="after")
    def _check_pair(self) -> EtcdTlsConfig:
        problems = _Problems()
        if bool(self.cert_file) != bool(self.key_file):
            missing = "key_file" if self.cert_file else "cert_file"
            problems.add(
                missing,
                "is required with "
                + ("cert_file" if self.cert_file else "key_file")
                + ": the client certificate and its private key go together (PEM files)",
            )
        problems.raise_if_any()
        return self


class EtcdConfig(_Section):
    """`etcd`: the cluster holding leases and offsets (and, for discovery, KafScale's metadata)."""

    endpoints: tuple[str, ...] = ()
    username: str = ""
    password: SecretStr = SecretStr("")
    tls: EtcdTlsConfig = EtcdTlsConfig()

    @field_validator("endpoints", mode="before")
    @classmethod
    def _split_comma_list(cls, value: object) -> object:
        # `--set etcd.endpoints=a,b` and env-rendered configs give one string.
        if isinstance(value, str):
            return [item for item in (part.strip() for part in value.split(",")) if item]
        return value

    @field_validator("endpoints")
    @classmethod
    def _no_empty_endpoint(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not endpoint for endpoint in value):
            raise _invalid("must not contain empty entries (each is host:port or http://host:port)")
        return value


def _offsets_backend(value: object) -> object:
    value = _lowercase(value)
    if isinstance(value, str) and value not in {"etcd", "sqlite"}:
        raise _invalid(
            f"{value!r} is not supported; allowed values: 'etcd', 'sqlite'. The Go processor treats any "
            "backend other than etcd as a no-op store that persists no offsets and rewrites every "
            "segment on every poll; use 'etcd' (shared by several processes) or 'sqlite' (embedded, one "
            "machine, file at offsets.sqlite_path)"
        )
    return value


class OffsetsConfig(_Section):
    """`offsets`: where leases and committed offsets live."""

    backend: Annotated[OffsetsBackend, BeforeValidator(_offsets_backend)] = "etcd"
    lease_ttl_seconds: Annotated[int, _zero_means(30)] = 30
    # Used exactly as written, as Go does: it is part of etcd keys shared with the Go processor.
    key_prefix: str = "processors"
    sqlite_path: str = DEFAULT_SQLITE_PATH
    # AWS: the stack's one function in the VPC, the only etcd client; the store is reached through it
    # (adapters/lambda_checkpoints.py), so nothing else needs the VPC. Set by the template.
    checkpoint_function: str = ""


class ProcessorConfig(_Section):
    """`processor`: the polling loop of `kafscale-iceberg run`."""

    poll_interval_seconds: Annotated[int, _zero_means(5)] = 5


class RegistryConfig(_Section):
    """`schema.registry`: JSON schemas served at `{base_url}/{topic}.json`."""

    base_url: str = ""
    timeout_seconds: Annotated[int, _zero_means(5)] = 5
    cache_seconds: Annotated[int, _zero_means(300)] = 300

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str) -> str:
        if value and not re.match(r"https?://", value):
            raise _invalid(f"must be an http:// or https:// URL, got {value!r}")
        # `{base_url}/{topic}.json` must not get a double slash.
        return value.rstrip("/")


class SchemaConfig(_Section):
    """`schema`: JSON-schema validation of record values against the registry."""

    mode: Annotated[SchemaMode, BeforeValidator(_false_means_off)] = SchemaMode.OFF
    registry: RegistryConfig = Field(default_factory=RegistryConfig)

    # `mode` other than off needs `registry.base_url` for mappings of JSON values: checked with the
    # mappings (`KafscaleConfig`), since self-described formats are validated by their own schemas.


# --------------------------------------------------------------------------------------------------
# This product's own sections


def _check_runs_location(value: str) -> str:
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value) and not value.startswith(("s3://", "file://")):
        raise _invalid(f"must be an s3:// URI, a file:// URI or a local path, got {value!r}")
    return value.rstrip("/") or value


DEFAULT_MIN_BYTES_PER_RUN = 96 * MIB
"""A run starts once this much is pending, or once its oldest segment waited `max_wait_seconds`
(Firehose's buffering hints: size or interval, whichever comes first). 96 MiB starts a 1 MB/s topic's
run about every 100 s (p50 PUT->committed about a minute) and keeps a 10 MB/s one's per-run cost under
$0.010/GB (docs/cost.md)."""
DEFAULT_MAX_WAIT_SECONDS = 480
"""A topic below `min_bytes_per_run` runs this long after its oldest pending segment: a small topic's
record waits 4 minutes on average (p50 PUT->committed ~250 s on the Lambda runner, under 5 minutes),
and pays its per-run cost 7.5 times an hour instead of 60 (docs/configuration.md "Batching")."""


class RunsConfig(_Section):
    """`runs`: how pending segments are grouped into runs, and where run plans and results go."""

    location: Annotated[str, AfterValidator(_check_runs_location)] = ""
    # A run grows with the backlog up to this (and on EMR Serverless up to what its biggest job holds,
    # domain/run_sizing.py): a topic behind by gigabytes catches up in runs of a minute or so.
    max_bytes_per_run: PositiveByteSize = ByteSize(8 * GIB)
    max_segments_per_run: Annotated[int, Field(gt=0)] = 5000
    # A topic commits at most about every `max_wait_seconds` unless this much is pending (unset: at
    # most `max_bytes_per_run`): docs/configuration.md "Batching" gives the reasons.
    min_bytes_per_run: Annotated[ByteSize, Field(ge=0)] = ByteSize(DEFAULT_MIN_BYTES_PER_RUN)
    max_wait_seconds: Annotated[int, Field(ge=0)] = DEFAULT_MAX_WAIT_SECONDS
    target_file_size_bytes: PositiveByteSize = ByteSize(128 * MIB)
    corrupt_segment_policy: Annotated[CorruptSegmentPolicy, BeforeValidator(_lowercase)] = (
        CorruptSegmentPolicy.FAIL
    )
    verify_crc: bool = True
    timeout_minutes: Annotated[int, Field(gt=0)] = 60
    max_consecutive_failures: Annotated[int, Field(gt=0)] = 3
    retry_backoff_seconds: Annotated[int, Field(ge=0)] = 30
    retry_backoff_max_seconds: Annotated[int, Field(ge=0)] = 900

    @model_validator(mode="after")
    def _check_bounds(self) -> RunsConfig:
        problems = _Problems()
        if (
            "min_bytes_per_run" not in self.model_fields_set
            and self.min_bytes_per_run > self.max_bytes_per_run
        ):
            # The default never refuses a smaller run limit (frozen model: set once, here).
            object.__setattr__(self, "min_bytes_per_run", self.max_bytes_per_run)
        if self.min_bytes_per_run > self.max_bytes_per_run:
            problems.add(
                "min_bytes_per_run",
                f"must not exceed max_bytes_per_run ({self.max_bytes_per_run}), got {self.min_bytes_per_run}",
            )
        if self.retry_backoff_max_seconds < self.retry_backoff_seconds:
            problems.add(
                "retry_backoff_max_seconds",
                f"must be >= retry_backoff_seconds ({self.retry_backoff_seconds}), "
                f"got {self.retry_backoff_max_seconds}",
            )
        problems.raise_if_any()
        return self

    def retry_delay_seconds(self, consecutive_failures: int) -> int:
        """Backoff before re-signalling a topic: base doubled per consecutive failure, capped; 0 if none."""
        if consecutive_failures <= 0:
            return 0
        # Cap the exponent first so a long failure streak can't build a huge integer.
        doubled = self.retry_backoff_seconds << min(consecutive_failures - 1, 32)
        return min(doubled, self.retry_backoff_max_seconds)


_DURATION = re.compile(r"(\d+)\s*([smhd]?)")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration_seconds(value: object) -> object:
    """`7d`, `12h`, `30m`, `45s` or a number of seconds -> seconds."""
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip().lower())
        if match is None:
            raise _invalid(f"is not a duration: {value!r} (use seconds, or a number with s, m, h or d: '7d')")
        return int(match.group(1)) * _DURATION_UNITS[match.group(2)]
    return value


DurationSeconds = Annotated[int, BeforeValidator(_duration_seconds), Field(ge=0)]


class MaintenanceConfig(_Section):
    """`maintenance`: compaction, snapshot expiry and orphan-file cleanup of the tables (`maintain`)."""

    enabled: bool = True
    interval_seconds: Annotated[DurationSeconds, Field(gt=0)] = 3600
    snapshot_retention: DurationSeconds = 7 * 86400
    keep_snapshots: Annotated[int, Field(ge=1)] = 100
    metadata_previous_versions_max: Annotated[int, Field(ge=1)] = 100
    orphan_grace: DurationSeconds = 86400
    small_file_bytes: PositiveByteSize = ByteSize(32 * MIB)
    compaction_min_small_files: Annotated[int, Field(ge=2)] = 20
    compaction_max_bytes: PositiveByteSize = ByteSize(GIB)
    # Merge-on-read upsert tables: when compaction folds position deletes (domain/maintenance.py).
    max_delete_ratio: Annotated[float, Field(gt=0, le=1)] = 0.3
    max_delete_files: Annotated[int, Field(ge=1)] = 20

    def delete_folding(self) -> DeleteFolding:
        """When compaction folds position deletes (`max_delete_ratio`, `max_delete_files`)."""
        return DeleteFolding(max_delete_ratio=self.max_delete_ratio, max_delete_files=self.max_delete_files)

    def compaction_due(self, health: TableHealth, *, force: bool) -> bool:
        """Whether a pass plans a compaction: forced, enough small files, or delete files to fold."""
        return force or health.small_files >= self.compaction_min_small_files or health.delete_files > 0

    # Compaction as Spark work and the small-file trigger (services/compaction_jobs.py,
    # services/compaction_trigger.py).
    compaction_engine: Literal["spark", "inline"] = "spark"
    compaction_wait_seconds: DurationSeconds = 600
    trigger_small_files: Annotated[int, Field(ge=0)] = 100
    # With the spark engine, a compaction of at most this many bytes runs in the maintaining process
    # (pyarrow: no job, no JVM, no EMR minimum); 0: every compaction is a job.
    compaction_inline_max_bytes: Annotated[ByteSize, Field(ge=0)] = ByteSize(256 * MIB)

    def compacts_inline(self, planned_bytes: int) -> bool:
        """Whether a compaction of `planned_bytes` runs in this process rather than as a Spark job."""
        return self.compaction_engine == "inline" or planned_bytes <= self.compaction_inline_max_bytes


class LocalRunnerConfig(_Section):
    """`runner.local`: Spark in this process's machine (`kafscale-iceberg run`, demo, tests)."""

    master: str = "local[*]"
    spark_conf: StringMap = Field(default_factory=dict, repr=False)
    keep_session_warm: bool = True


class EmrServerlessRunnerConfig(_Section):
    """`runner.emr_serverless`: the EMR Serverless application runs execute on."""

    application_id: str = ""
    execution_role_arn: str = ""
    entry_point: str = ""
    release_label: str = DEFAULT_EMR_RELEASE_LABEL
    venv_archive: str = ""
    image: str = ""
    spark_submit_parameters: str = ""
    log_uri: str = ""
    region: str = ""
    poll_interval_seconds: Annotated[int, Field(gt=0)] = 15
    # The vCPU one job may take: the application's maximum capacity (template.yaml `EmrMaximumCpu`,
    # "16 vCPU"). A run's job is sized from its bytes up to it (domain/job_sizing.py).
    max_vcpu: Annotated[int, BeforeValidator(_vcpu_count), Field(ge=3)] = DEFAULT_MAX_VCPU

    def job_spark_submit_parameters(self) -> str:
        """The `sparkSubmitParameters` of a job run: the Python environment's conf, then the extras."""
        parts: list[str] = []
        if self.venv_archive:
            parts += [
                f"--conf spark.archives={self.venv_archive}#environment",
                f"--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON={_EMR_PYTHON}",
                f"--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON={_EMR_PYTHON}",
                f"--conf spark.executorEnv.PYSPARK_PYTHON={_EMR_PYTHON}",
            ]
        elif self.image:
            parts += [
                f"--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON={_EMR_IMAGE_PYTHON}",
                f"--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON={_EMR_IMAGE_PYTHON}",
                f"--conf spark.executorEnv.PYSPARK_PYTHON={_EMR_IMAGE_PYTHON}",
            ]
        if self.spark_submit_parameters:
            parts.append(self.spark_submit_parameters)
        return " ".join(parts)

    def problems(self) -> list[tuple[str, str]]:
        """What is missing or malformed for this runner to be used (checked only when it is selected)."""
        found: list[tuple[str, str]] = []
        if not re.fullmatch(r"[0-9a-z]+", self.application_id):
            found.append(
                (
                    "application_id",
                    f"is required: the EMR Serverless application id, got {self.application_id!r}",
                )
            )
        if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/.+", self.execution_role_arn):
            found.append(
                (
                    "execution_role_arn",
                    "is required: an IAM role ARN (arn:aws:iam::123456789012:role/name), "
                    f"got {self.execution_role_arn!r}",
                )
            )
        for key, value, what, required in (
            ("entry_point", self.entry_point, "spark_app/main.py", True),
            ("venv_archive", self.venv_archive, "a packed virtualenv (.tar.gz)", False),
            ("log_uri", self.log_uri, "a log folder", False),
        ):
            if not value and required:
                found.append((key, f"is required: the s3:// URI of {what}"))
            elif value:
                try:
                    _s3_uri(value, what=what)
                except PydanticCustomError as exc:
                    found.append((key, exc.message()))
        if not self.release_label.startswith("emr-"):
            found.append(
                (
                    "release_label",
                    f"must be an EMR release label (e.g. {DEFAULT_EMR_RELEASE_LABEL}), "
                    f"got {self.release_label!r}",
                )
            )
        if bool(self.venv_archive) == bool(self.image):
            found.append(
                (
                    "venv_archive",
                    "exactly one of venv_archive (an s3:// packed virtualenv shipped with each run) or "
                    "image (the custom image the application was created with) is required, "
                    + ("both are set" if self.venv_archive else "neither is set"),
                )
            )
        return found


class InlineRunnerConfig(_Section):
    """`runner.inline`: each run's tasks in this process, no JVM (`local/inline_runner.py`)."""

    # 0: one thread per core this process may use.
    workers: Annotated[int, Field(ge=0)] = 0


DEFAULT_LAMBDA_MAX_BYTES = 512 * MIB


class LambdaRunnerConfig(_Section):
    """`runner.lambda`: the runs small enough for the Lambda runner on AWS (`functions/plan_runner.py`)."""

    # Planned bytes up to which a run executes in the runner function instead of an EMR job; 0 sends
    # every run to EMR Serverless. Sized from the in-process throughput measured in bench/ (see
    # docs/configuration.md), so a run ends well inside Lambda's 15 minutes.
    max_bytes: Annotated[ByteSize, Field(ge=0)] = ByteSize(DEFAULT_LAMBDA_MAX_BYTES)


class RunnerConfig(_Section):
    """`runner`: where each run's tasks execute."""

    type: Annotated[RunnerType, BeforeValidator(_lowercase)] = "local"
    local: LocalRunnerConfig = Field(default_factory=LocalRunnerConfig)
    inline: InlineRunnerConfig = Field(default_factory=InlineRunnerConfig)
    emr_serverless: EmrServerlessRunnerConfig = Field(default_factory=EmrServerlessRunnerConfig)
    lambda_: LambdaRunnerConfig = Field(default_factory=LambdaRunnerConfig, alias="lambda")

    @model_validator(mode="after")
    def _selected_runner_is_complete(self) -> RunnerConfig:
        if self.type == "emr_serverless":
            problems = _Problems()
            for key, problem in self.emr_serverless.problems():
                problems.add(f"emr_serverless.{key}", problem)
            problems.raise_if_any()
        return self


class TypesConfig(_Section):
    """`types`: the column types this product chooses where a record schema leaves a choice.

    `time` (`time`, `long_micros`, `string`; default `time`): a schema's time of day (Avro
    `time-millis`/`time-micros`, Connect and Debezium `Time`, Debezium `MicroTime`) in a table whose
    columns come from the schemas. `time` is exact and read by Trino/Athena, DuckDB, iceberg-rust,
    pyiceberg and Flink, but Spark 3.5 and 4.0 refuse the whole table (apache/iceberg #9006): choose
    `long_micros` (microseconds since midnight) or `string` (`HH:MM:SS.ffffff`) when Spark reads the
    tables. Applies to new columns; a table's existing `time` column stays `time`.
    """

    time: Annotated[TimeColumns, BeforeValidator(_lowercase)] = TimeColumns.TIME


class NotificationsConfig(_Section):
    """`notifications`: the SQS queues carrying S3 events and work items."""

    queue_url: str = ""
    work_queue_url: str = ""
    rejected_queue_url: str = ""

    @field_validator("queue_url", "work_queue_url", "rejected_queue_url")
    @classmethod
    def _is_a_queue_url(cls, value: str) -> str:
        if value and not re.match(r"https?://", value):
            raise _invalid(
                f"must be an SQS queue URL (https://sqs.<region>.amazonaws.com/...), got {value!r}"
            )
        return value

    @field_validator("queue_url")
    @classmethod
    def _standard_queue(cls, value: str) -> str:
        if value.endswith(".fifo"):
            raise _invalid(f"must be a standard queue: S3 cannot notify a FIFO queue, got {value!r}")
        return value

    @field_validator("work_queue_url")
    @classmethod
    def _fifo_queue(cls, value: str) -> str:
        if value and not value.endswith(".fifo"):
            raise _invalid(
                f"must be a FIFO queue (its URL ends in .fifo; work is grouped by topic), got {value!r}"
            )
        return value
