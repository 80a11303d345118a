"""The YAML configuration: every key of KafScale's Go Iceberg processor, plus this product's own keys.

Loaded and validated once, at the edge (`load_config`, `parse_config`, `config_from_mapping`); inside
the program the frozen models below are passed around as typed values. Every key, default and rule is
documented in `docs/configuration.md`.

Go compatibility, in short: a file the Go processor accepts loads here with the same meaning (same
defaults, "0 or null means the default" where Go has it, the `KAFSCALE_ICEBERG_LFS_*` environment
overrides), with three deliberate exceptions that turn silent misbehaviour into an error: an
`offsets.backend` other than `etcd`/`sqlite` (Go silently stores nothing), an unparsable environment
override (Go silently ignores it), and settings that can only fail at runtime in Go (a mapping column
named like a base field, `rest` catalog `username` without `password`, no mappings at all).

YAML is read the way Go's yaml.v3 reads it into typed fields, not the YAML 1.1 way: an unquoted
`off`, `no` or `on` stays a string where the key is a string (the shipped `lfs.mode: off`), `1:20` is
not a number, and duplicate keys are an error. Unknown keys are never an error (Go ignores them) but
each is logged as a warning with its path and kept in `KafscaleConfig.unknown_keys`.

Only pydantic, PyYAML and pure modules of this package are imported: this module is on the Lambda
cold-start path. Enumerations a run plan also carries (`ColumnType`, `PartitionTransform`,
`SchemaMode`, `CorruptSegmentPolicy`) and `PartitionField` are the `domain.runs` types, so config
values go into plans as they are; the settings only the config knows are string Literals.
"""

from __future__ import annotations

import logging
import os
import re
import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from yaml.constructor import ConstructorError

from kafscale_iceberg.domain.runs import (
    DECIMAL_MAX_PRECISION,
    ColumnSpec,
    ColumnType,
    CorruptSegmentPolicy,
    LfsSettings,
    PartitionField,
    PartitionTransform,
    SchemaMode,
)
from kafscale_iceberg.domain.runs import LfsMode as PlanLfsMode
from kafscale_iceberg.domain.schema import BASE_FIELDS
from kafscale_iceberg.exceptions import ConfigValidationError, SegmentKeyError
from kafscale_iceberg.segments.keys import normalize_namespace, validate_topic

logger = logging.getLogger(__name__)

__all__ = [
    "LFS_ENV_OVERRIDES",
    "LFS_METADATA_FIELD_TYPES",
    "CatalogConfig",
    "CatalogType",
    "ColumnConfig",
    "DiscoveryConfig",
    "DiscoveryMode",
    "EmrServerlessRunnerConfig",
    "EtcdConfig",
    "IcebergConfig",
    "KafscaleConfig",
    "LfsConfig",
    "LfsMode",
    "LocalRunnerConfig",
    "MappingConfig",
    "MappingSchemaConfig",
    "NotificationsConfig",
    "OffsetsBackend",
    "OffsetsConfig",
    "ProcessorConfig",
    "RegistryConfig",
    "RunnerConfig",
    "RunnerType",
    "RunsConfig",
    "S3Config",
    "SchemaConfig",
    "SchemaSource",
    "config_from_mapping",
    "describe_partition_field",
    "load_config",
    "parse_config",
    "parse_config_yaml",
]

CatalogType = Literal["rest", "glue", "sql"]
DiscoveryMode = Literal["auto", "etcd", "s3"]
OffsetsBackend = Literal["etcd", "sqlite"]
SchemaSource = Literal["mapping", "registry", "none"]
LfsMode = Literal["off", "resolve", "reference", "skip", "hybrid"]
RunnerType = Literal["local", "emr_serverless"]

# Column name -> type of the eight base fields every KafScale table has (ids 1-8).
_BASE_FIELD_TYPES: Mapping[str, ColumnType] = types.MappingProxyType({f.name: f.type for f in BASE_FIELDS})
# Added to the table when a mapping sets lfs.store_metadata (Go appends them if absent).
LFS_METADATA_FIELD_TYPES: Mapping[str, ColumnType] = types.MappingProxyType(
    {
        "lfs_content_type": ColumnType.STRING,
        "lfs_blob_size": ColumnType.LONG,
        "lfs_checksum": ColumnType.STRING,
        "lfs_checksum_alg": ColumnType.STRING,
        "lfs_bucket": ColumnType.STRING,
        "lfs_key": ColumnType.STRING,
    }
)
# Environment variable -> lfs key, applied to every mapping (Go `applyLfsEnvOverrides`).
LFS_ENV_OVERRIDES: Mapping[str, str] = types.MappingProxyType(
    {
        "KAFSCALE_ICEBERG_LFS_MODE": "mode",
        "KAFSCALE_ICEBERG_LFS_MAX_INLINE_SIZE": "max_inline_size",
        "KAFSCALE_ICEBERG_LFS_STORE_METADATA": "store_metadata",
        "KAFSCALE_ICEBERG_LFS_VALIDATE_CHECKSUM": "validate_checksum",
        "KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY": "resolve_concurrency",
    }
)

GIB = 1024**3
MIB = 1024**2
DEFAULT_RUNS_DIRECTORY = "_kafscale_runs"
DEFAULT_SQLITE_PATH = ".kafscale-iceberg/offsets.sqlite"
DEFAULT_EMR_RELEASE_LABEL = "emr-spark-8.0.0"
DEAD_LETTER_SUFFIX = "__dlq"
_EMR_PYTHON = "./environment/bin/python"
# The interpreter infra/emr/Dockerfile's image links (the one the package was installed for).
_EMR_IMAGE_PYTHON = "/usr/local/bin/kafscale-python"

# Error types this module raises inside validation; `_problems_from` turns them into key-path lines.
_VALUE_PROBLEM = "kafscale_config_value"
_SECTION_PROBLEMS = "kafscale_config_section"
# A bad value under these keys is never echoed back: it may be (or contain) a secret.
_SECRET_KEYS = frozenset({"password", "token", "properties", "spark_conf"})


# --------------------------------------------------------------------------------------------------
# Validation helpers


def _invalid(message: str) -> PydanticCustomError:
    """An error for one value; the message already says what is wrong and what is allowed."""
    return PydanticCustomError(_VALUE_PROBLEM, "{message}", {"message": message})


class _Problems:
    """Collects every cross-field problem of one section, so they are reported together, not first-only."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str]] = []

    def add(self, key: str, problem: str) -> None:
        """Record `problem` at `key`, a path relative to the section being validated."""
        self._items.append((key, problem))

    def raise_if_any(self) -> None:
        if self._items:
            summary = "; ".join(f"{key}: {problem}" for key, problem in self._items)
            raise PydanticCustomError(
                _SECTION_PROBLEMS, "{summary}", {"summary": summary, "problems": tuple(self._items)}
            )


def _lowercase(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _false_means_off(value: object) -> object:
    # YAML 1.1 (PyYAML's safe_load, used by whoever built a dict for config_from_mapping) reads an
    # unquoted `off` as False; the Go processor reads it as the string "off".
    if value is False:
        return "off"
    return _lowercase(value)


def _catalog_type(value: object) -> object:
    value = _lowercase(value)
    # The Go processor hands the type to iceberg-go's catalog registry, where http/https name REST.
    return "rest" if value in {"http", "https"} else value


def _zero_means(default: int) -> AfterValidator:
    """Go's rule for its integer settings: 0, null or absent selects the default; negative is an error."""

    def check(value: int) -> int:
        if value == 0:
            return default
        if value < 0:
            raise _invalid(f"must be > 0 (0 or null selects the default {default}), got {value}")
        return value

    return AfterValidator(check)


def _as_text(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


def _text_to_map(value: object) -> object:
    # Free-form string maps (spark conf, catalog properties) from a pre-built dict: numbers and
    # booleans become the text Spark and pyiceberg expect.
    if isinstance(value, Mapping):
        return {key: _as_text(item) for key, item in value.items()}
    return value


def _s3_uri(value: str, *, what: str) -> str:
    if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.\-]{1,62}(/.*)?", value):
        raise _invalid(f"must be an s3:// URI of {what} (s3://bucket/key), got {value!r}")
    return value


StringMap = Annotated[Mapping[str, str], BeforeValidator(_text_to_map)]
PositiveByteSize = Annotated[ByteSize, Field(gt=0)]


class _Section(BaseModel):
    """One YAML mapping. Null or an empty string means "the default", as Go's zero values do."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", str_strip_whitespace=True, hide_input_in_errors=True
    )

    @model_validator(mode="before")
    @classmethod
    def _zero_values_mean_default(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            return data
        present = {
            key: value
            for key, value in data.items()
            if value is not None and not (isinstance(value, str) and not value.strip())
        }
        return cls._derive_defaults(present)

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults that depend on other keys of the raw input; a section overrides it if needed."""
        return data


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

    @model_validator(mode="after")
    def _check_per_type(self) -> CatalogConfig:
        problems = _Problems()
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


class IcebergConfig(_Section):
    """`iceberg`: the catalog and the warehouse location tables are created under."""

    catalog: CatalogConfig
    warehouse: str = ""

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        # An absent catalog is reported as its missing keys (iceberg.catalog.type), not as "catalog".
        data.setdefault("catalog", {})
        return data

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

    @model_validator(mode="after")
    def _validation_needs_a_registry(self) -> SchemaConfig:
        if self.mode != "off" and not self.registry.base_url:
            problems = _Problems()
            problems.add("registry.base_url", f"is required when schema.mode is '{self.mode.value}'")
            problems.raise_if_any()
        return self


_DECIMAL_TYPE = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")


class ColumnConfig(_Section):
    """`mappings[].schema.columns[]`: one column extracted from the record's JSON value.

    Besides the Go processor's types: `timestamptz`, `uuid`, `decimal(P,S)` (or `type: decimal` with
    `precision` and `scale`), `struct` with `fields:` (columns), `list` with `element:` and `map`
    (string keys) with `value:` (each a column without a name: `{type: ...}`).
    """

    name: str = ""
    type: Annotated[ColumnType, BeforeValidator(_lowercase)]
    required: bool = False
    precision: int | None = None
    scale: int | None = None
    fields: tuple[ColumnConfig, ...] = ()
    element: ColumnConfig | None = None
    value: ColumnConfig | None = None

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        declared = data.get("type")
        if isinstance(declared, str):
            match = _DECIMAL_TYPE.fullmatch(declared.strip().lower())
            if match:
                data = {**data, "type": "decimal", "precision": int(match[1]), "scale": int(match[2])}
        return data

    @model_validator(mode="after")
    def _check_parts(self) -> ColumnConfig:
        problems = _Problems()
        kind = self.type
        if kind is ColumnType.DECIMAL:
            if self.precision is None or not 1 <= self.precision <= DECIMAL_MAX_PRECISION:
                problems.add(
                    "type", f"decimal needs a precision of 1 to {DECIMAL_MAX_PRECISION}: decimal(P,S)"
                )
            elif self.scale is not None and not 0 <= self.scale <= self.precision:
                problems.add("type", f"decimal scale must be between 0 and the precision {self.precision}")
        if (kind is ColumnType.STRUCT) != bool(self.fields):
            problems.add("fields", "is required for a struct column, and only for one")
        if (kind is ColumnType.LIST) != (self.element is not None):
            problems.add("element", "is required for a list column ({type: ...}), and only for one")
        if (kind is ColumnType.MAP) != (self.value is not None):
            problems.add(
                "value", "is required for a map column ({type: ...}; keys are strings), and only for one"
            )
        names = [f.name for f in self.fields]
        for index, name in enumerate(names):
            if not name:
                problems.add(f"fields[{index}].name", "is required")
            elif names.index(name) != index:
                problems.add(f"fields[{index}].name", f"{name!r} is listed twice")
        problems.raise_if_any()
        return self

    def to_spec(self, name: str | None = None) -> ColumnSpec:
        """The column as a run plan carries it."""
        return ColumnSpec(
            name=self.name if name is None else name,
            type=self.type,
            required=self.required,
            precision=self.precision if self.type is ColumnType.DECIMAL else None,
            scale=(self.scale or 0) if self.type is ColumnType.DECIMAL else None,
            fields=tuple(f.to_spec() for f in self.fields),
            element=self.element.to_spec("element") if self.element is not None else None,
            value=self.value.to_spec("value") if self.value is not None else None,
        )


class MappingSchemaConfig(_Section):
    """`mappings[].schema`: where the table's extra columns come from."""

    source: Annotated[SchemaSource, BeforeValidator(_lowercase)] = "none"
    columns: tuple[ColumnConfig, ...] = ()
    allow_type_widening: bool = False

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        # Go's rule: `mapping` when columns are listed, else `registry` when schema.registry.base_url is
        # set (KafscaleConfig fills that case in, it needs the global section), else `none`.
        if "source" not in data:
            data["source"] = "mapping" if data.get("columns") else "none"
        return data

    @model_validator(mode="after")
    def _check_columns(self) -> MappingSchemaConfig:
        problems = _Problems()
        if self.source == "mapping" and not self.columns:
            problems.add("columns", "is required when schema.source is 'mapping' (list {name, type})")
        seen: set[str] = set()
        for index, column in enumerate(self.columns):
            if not column.name:
                problems.add(f"columns[{index}].name", "is required")
            elif column.name in _BASE_FIELD_TYPES:
                problems.add(
                    f"columns[{index}].name",
                    f"{column.name!r} is a base field every KafScale table already has "
                    f"({', '.join(_BASE_FIELD_TYPES)}); choose another name",
                )
            elif column.name in seen:
                problems.add(f"columns[{index}].name", f"{column.name!r} is listed twice")
            seen.add(column.name)
        problems.raise_if_any()
        return self


class LfsConfig(_Section):
    """`mappings[].lfs`: how KafScale large-file (LFS) envelopes in record values are handled."""

    mode: Annotated[LfsMode, BeforeValidator(_false_means_off)] = "off"
    max_inline_size: int = 0
    store_metadata: bool = False
    validate_checksum: bool = True
    resolve_concurrency: Annotated[int, _zero_means(4)] = 4
    # Ours: buckets besides s3.bucket that envelopes may name (the job's role must be able to read them).
    blob_buckets: tuple[str, ...] = ()

    @field_validator("blob_buckets", mode="before")
    @classmethod
    def _single_bucket_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _hybrid_needs_a_threshold(self) -> LfsConfig:
        if self.mode == "hybrid" and self.max_inline_size <= 0:
            problems = _Problems()
            problems.add(
                "max_inline_size",
                f"must be > 0 when mode is 'hybrid' (blobs up to this size are resolved inline), "
                f"got {self.max_inline_size}",
            )
            problems.raise_if_any()
        return self


# --------------------------------------------------------------------------------------------------
# Mappings (Go keys plus ours)

_TRANSFORMS: Mapping[str, PartitionTransform] = {
    "identity": PartitionTransform.IDENTITY,
    "year": PartitionTransform.YEAR,
    "years": PartitionTransform.YEAR,
    "month": PartitionTransform.MONTH,
    "months": PartitionTransform.MONTH,
    "day": PartitionTransform.DAY,
    "days": PartitionTransform.DAY,
    "hour": PartitionTransform.HOUR,
    "hours": PartitionTransform.HOUR,
}
_PARTITION_TEXT = re.compile(r"(?:(?P<transform>\w+)\s*\(\s*(?P<inner>[^()\s]+)\s*\)|(?P<bare>[^()\s]+))")
_PARTITION_FORMS = "col, identity(col), year(col), month(col), day(col), hour(col)"
_DATE_OR_TIMESTAMP = frozenset({ColumnType.DATE, ColumnType.TIMESTAMP})
_UNPARTITIONED_TYPES = frozenset(
    {
        ColumnType.TIMESTAMPTZ,
        ColumnType.UUID,
        ColumnType.DECIMAL,
        ColumnType.STRUCT,
        ColumnType.LIST,
        ColumnType.MAP,
    }
)
_TIME_TRANSFORM_TYPES: Mapping[PartitionTransform, frozenset[ColumnType]] = {
    PartitionTransform.YEAR: _DATE_OR_TIMESTAMP,
    PartitionTransform.MONTH: _DATE_OR_TIMESTAMP,
    PartitionTransform.DAY: _DATE_OR_TIMESTAMP,
    PartitionTransform.HOUR: frozenset({ColumnType.TIMESTAMP}),
}


def _parse_partition_field(value: object) -> object:
    """`col`, `identity(col)`, `day(col)`, ... (plural `days(col)` too) -> a PartitionField."""
    if not isinstance(value, str):
        return value
    match = _PARTITION_TEXT.fullmatch(value.strip())
    if match is None:
        raise _invalid(f"{value!r} is not a partition field; allowed forms: {_PARTITION_FORMS}")
    if match["bare"] is not None:
        return PartitionField(column=match["bare"], transform=PartitionTransform.IDENTITY)
    transform = _TRANSFORMS.get(match["transform"].lower())
    if transform is None:
        raise _invalid(
            f"transform {match['transform']!r} in {value!r} is not supported; allowed forms: "
            f"{_PARTITION_FORMS} (each data file holds one value per partition field, so bucket and "
            "truncate are not offered)"
        )
    return PartitionField(column=match["inner"], transform=transform)


def describe_partition_field(field: PartitionField) -> str:
    """The config spelling of a partition field: `day(ordered_at)`."""
    return f"{field.transform.value}({field.column})"


def _split_identifier(value: str) -> tuple[str, ...]:
    return tuple(value.split("."))


def _check_identifier(value: str) -> str:
    parts = _split_identifier(value)
    if len(parts) < 2 or any(not part or part != part.strip() for part in parts):
        raise _invalid(f"must be an Iceberg identifier 'namespace.table' (e.g. prod.orders), got {value!r}")
    return value


def _check_topic(value: str) -> str:
    try:
        return validate_topic(value)
    except SegmentKeyError as exc:
        raise _invalid(f"{value!r} is not a Kafka topic name: {exc.problem}") from None


class MappingConfig(_Section):
    """`mappings[]`: one topic ingested into one table (and its dead-letter table)."""

    topic: Annotated[str, AfterValidator(_check_topic)]
    table: Annotated[str, AfterValidator(_check_identifier)]
    mode: Annotated[Literal["append"], BeforeValidator(_lowercase)] = "append"
    create_table_if_missing: bool = False
    schema_: MappingSchemaConfig = Field(default_factory=MappingSchemaConfig, alias="schema")
    lfs: LfsConfig = Field(default_factory=LfsConfig)
    # Ours:
    dead_letter_table: str = Field(default="", validate_default=True)
    partition_by: tuple[Annotated[PartitionField, BeforeValidator(_parse_partition_field)], ...] = ()
    corrupt_segment_policy: Annotated[CorruptSegmentPolicy | None, BeforeValidator(_lowercase)] = None
    target_file_size_bytes: PositiveByteSize | None = None

    @field_validator("partition_by", mode="before")
    @classmethod
    def _single_field_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("dead_letter_table")
    @classmethod
    def _default_dead_letter_table(cls, value: str, info: ValidationInfo) -> str:
        table = info.data.get("table")
        if table is None:  # the table itself is invalid and reported; nothing to derive from
            return value
        if not value:
            return f"{table}{DEAD_LETTER_SUFFIX}"
        if "." not in value:  # a bare name lives in the table's namespace
            return ".".join((*_split_identifier(table)[:-1], value))
        return _check_identifier(value)

    @model_validator(mode="after")
    def _check_tables_and_partitions(self) -> MappingConfig:
        problems = _Problems()
        if self.dead_letter_table == self.table:
            problems.add("dead_letter_table", f"must differ from the table {self.table!r}")
        column_types = self.known_column_types()
        seen: set[PartitionField] = set()
        for index, field in enumerate(self.partition_by):
            key = f"partition_by[{index}]"
            if field in seen:
                problems.add(key, f"{describe_partition_field(field)} is listed twice")
            seen.add(field)
            column_type = column_types.get(field.column)
            if column_type is None:
                if self.schema_.source == "registry":
                    continue  # registry columns are only known at planning time; checked there
                problems.add(
                    key,
                    f"column {field.column!r} is neither a base field ({', '.join(_BASE_FIELD_TYPES)}) "
                    "nor a column of this mapping",
                )
                continue
            if field.transform is PartitionTransform.IDENTITY and column_type in _UNPARTITIONED_TYPES:
                problems.add(
                    key, f"{column_type.value} columns cannot be partitioned by; choose another column"
                )
            allowed_types = _TIME_TRANSFORM_TYPES.get(field.transform)
            if allowed_types is not None and column_type not in allowed_types:
                problems.add(
                    key,
                    f"{describe_partition_field(field)} needs a "
                    f"{' or '.join(sorted(t.value for t in allowed_types))} column, but {field.column!r} is "
                    f"{column_type.value}"
                    + (" (milliseconds as a number)" if field.column == "timestamp_ms" else ""),
                )
        problems.raise_if_any()
        return self

    @model_validator(mode="after")
    def _lfs_columns_keep_their_types(self) -> MappingConfig:
        if not self.lfs.store_metadata or self.schema_.source != "mapping":
            return self
        problems = _Problems()
        for index, column in enumerate(self.schema_.columns):
            wanted = LFS_METADATA_FIELD_TYPES.get(column.name)
            if wanted is not None and column.type != wanted:
                problems.add(
                    f"schema.columns[{index}].type",
                    f"{column.name!r} is filled from LFS metadata (lfs.store_metadata), which is "
                    f"{wanted.value}; declare it {wanted.value} or drop it from the columns",
                )
        problems.raise_if_any()
        return self

    @property
    def identifier(self) -> tuple[str, ...]:
        """The table's identifier: `prod.orders` -> `("prod", "orders")`."""
        return _split_identifier(self.table)

    @property
    def namespace(self) -> tuple[str, ...]:
        """The table's namespace: every part but the last (`("prod",)`)."""
        return self.identifier[:-1]

    @property
    def table_name(self) -> str:
        """The table's own name: the last part (`"orders"`)."""
        return self.identifier[-1]

    @property
    def dead_letter_identifier(self) -> tuple[str, ...]:
        """The dead-letter table's identifier (default: `{table}__dlq` in the same namespace)."""
        return _split_identifier(self.dead_letter_table)

    def known_column_types(self) -> dict[str, ColumnType]:
        """Every column the table will have that the config alone determines, by name -> type."""
        types_by_name: dict[str, ColumnType] = dict(_BASE_FIELD_TYPES)
        if self.lfs.store_metadata:
            types_by_name.update(LFS_METADATA_FIELD_TYPES)
        if self.schema_.source == "mapping":
            types_by_name.update({column.name: column.type for column in self.schema_.columns})
        return types_by_name

    def lfs_settings(self, segment_bucket: str) -> LfsSettings:
        """The LFS settings a run plan carries; blobs may be read from the segment bucket and
        `lfs.blob_buckets` (see docs/configuration.md, "LFS")."""
        lfs = self.lfs
        buckets = tuple(dict.fromkeys(b for b in (segment_bucket, *lfs.blob_buckets) if b))
        return LfsSettings(
            mode=PlanLfsMode(lfs.mode),
            max_inline_size=lfs.max_inline_size,
            store_metadata=lfs.store_metadata,
            validate_checksum=lfs.validate_checksum,
            resolve_concurrency=max(1, lfs.resolve_concurrency),
            buckets=buckets,
        )

    def column_specs(self) -> tuple[ColumnSpec, ...]:
        """The mapping's columns as a run plan carries them (empty unless `schema.source` is `mapping`)."""
        if self.schema_.source != "mapping":
            return ()
        return tuple(column.to_spec() for column in self.schema_.columns)


# --------------------------------------------------------------------------------------------------
# This product's own sections


def _check_runs_location(value: str) -> str:
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value) and not value.startswith(("s3://", "file://")):
        raise _invalid(f"must be an s3:// URI, a file:// URI or a local path, got {value!r}")
    return value.rstrip("/") or value


class RunsConfig(_Section):
    """`runs`: how pending segments are grouped into runs, and where run plans and results go."""

    location: Annotated[str, AfterValidator(_check_runs_location)] = ""
    max_bytes_per_run: PositiveByteSize = ByteSize(GIB)
    max_segments_per_run: Annotated[int, Field(gt=0)] = 5000
    min_bytes_per_run: Annotated[ByteSize, Field(ge=0)] = ByteSize(0)
    max_wait_seconds: Annotated[int, Field(ge=0)] = 60
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
    # Added for compaction as Spark work and the small-file trigger (services/compaction_jobs.py,
    # services/compaction_trigger.py).
    compaction_engine: Literal["spark", "inline"] = "spark"
    compaction_wait_seconds: DurationSeconds = 600
    trigger_small_files: Annotated[int, Field(ge=0)] = 100


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


class RunnerConfig(_Section):
    """`runner`: where the Spark job of each run executes."""

    type: Annotated[RunnerType, BeforeValidator(_lowercase)] = "local"
    local: LocalRunnerConfig = Field(default_factory=LocalRunnerConfig)
    emr_serverless: EmrServerlessRunnerConfig = Field(default_factory=EmrServerlessRunnerConfig)

    @model_validator(mode="after")
    def _selected_runner_is_complete(self) -> RunnerConfig:
        if self.type == "emr_serverless":
            problems = _Problems()
            for key, problem in self.emr_serverless.problems():
                problems.add(f"emr_serverless.{key}", problem)
            problems.raise_if_any()
        return self


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


# --------------------------------------------------------------------------------------------------
# The whole file


def _raw_text(data: Mapping[str, Any], *path: str) -> str:
    """A string at `path` in raw input, or "" when absent or not a string (its own validation reports it)."""
    node: object = data
    for part in path:
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    return node.strip() if isinstance(node, str) else ""


def _is_storage_location(value: str) -> bool:
    return value.startswith(("s3://", "file://", "/"))


class KafscaleConfig(_Section):
    """The whole configuration file. Build it with `load_config`, `parse_config` or `config_from_mapping`."""

    s3: S3Config
    iceberg: IcebergConfig
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig)
    etcd: EtcdConfig = Field(default_factory=EtcdConfig)
    offsets: OffsetsConfig = Field(default_factory=OffsetsConfig)
    processor: ProcessorConfig = Field(default_factory=ProcessorConfig)
    schema_: SchemaConfig = Field(default_factory=SchemaConfig, alias="schema")
    mappings: tuple[MappingConfig, ...] = ()
    runs: RunsConfig = Field(default_factory=RunsConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)

    _source: str = PrivateAttr(default="<memory>")
    _unknown_keys: tuple[str, ...] = PrivateAttr(default=())

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        # Absent sections with required keys are reported as those keys (s3.bucket), not as "s3".
        data.setdefault("s3", {})
        data.setdefault("iceberg", {})
        warehouse = _raw_text(data, "iceberg", "warehouse").rstrip("/")
        if not _raw_text(data, "runs", "location") and _is_storage_location(warehouse):
            runs = dict(data["runs"]) if isinstance(data.get("runs"), Mapping) else {}
            data["runs"] = {**runs, "location": f"{warehouse}/{DEFAULT_RUNS_DIRECTORY}"}
        if _raw_text(data, "schema", "registry", "base_url") and isinstance(data.get("mappings"), list):
            data["mappings"] = [_with_registry_source(mapping) for mapping in data["mappings"]]
        return data

    @model_validator(mode="after")
    def _check_across_sections(self) -> KafscaleConfig:
        problems = _Problems()
        if not self.mappings:
            problems.add(
                "mappings", "at least one {topic, table} mapping is required (nothing would be ingested)"
            )
        if not self.etcd.endpoints:
            if self.offsets.backend == "etcd":
                problems.add(
                    "etcd.endpoints",
                    "is required when offsets.backend is 'etcd' (the default); on one machine without etcd "
                    "set offsets.backend: sqlite",
                )
            if self.discovery.mode == "etcd":
                problems.add("etcd.endpoints", "is required when discovery.mode is 'etcd'")
        if not self.runs.location:
            problems.add(
                "runs.location",
                "is required: no default can be derived because iceberg.warehouse "
                + (
                    f"{self.iceberg.warehouse!r} is not an s3:// or file:// location"
                    if self.iceberg.warehouse
                    else "is empty"
                )
                + " (e.g. s3://my-bucket/kafscale-runs)",
            )
        elif self.runner.type == "emr_serverless" and not self.runs.location.startswith("s3://"):
            problems.add(
                "runs.location",
                f"must be an s3:// URI when runner.type is 'emr_serverless' (EMR reads plans from S3), "
                f"got {self.runs.location!r}",
            )
        if self.iceberg.catalog.type == "sql" and not self.iceberg.warehouse:
            problems.add(
                "iceberg.warehouse",
                "is required when iceberg.catalog.type is 'sql': tables are created under it "
                "(e.g. file:///var/lib/kafscale/warehouse or s3://bucket/warehouse)",
            )
        lfs_topics = [mapping.topic for mapping in self.mappings if mapping.lfs.mode != "off"]
        if lfs_topics and not self.s3.region:
            problems.add(
                "s3.region", f"is required when lfs is enabled (mappings for {', '.join(lfs_topics)})"
            )
        tables = {mapping.table for mapping in self.mappings}
        first_index: dict[str, int] = {}
        for index, mapping in enumerate(self.mappings):
            key = f"mappings[{index}]"
            if mapping.topic in first_index:
                problems.add(
                    f"{key}.topic",
                    f"{mapping.topic!r} is already mapped by mappings[{first_index[mapping.topic]}]; "
                    "a topic maps to one table",
                )
            first_index.setdefault(mapping.topic, index)
            if mapping.schema_.source == "registry" and not self.schema_.registry.base_url:
                problems.add(f"{key}.schema.source", "'registry' needs schema.registry.base_url")
            if mapping.dead_letter_table in tables:
                problems.add(
                    f"{key}.dead_letter_table",
                    f"{mapping.dead_letter_table!r} is the table of another mapping",
                )
            if self.iceberg.catalog.type == "glue":
                for field, identifier in (
                    ("table", mapping.identifier),
                    ("dead_letter_table", mapping.dead_letter_identifier),
                ):
                    if len(identifier) != 2:
                        problems.add(
                            f"{key}.{field}",
                            f"{'.'.join(identifier)!r} has a nested namespace; Glue has one level "
                            "(database.table)",
                        )
        problems.raise_if_any()
        return self

    @property
    def source(self) -> str:
        """Where this config was read from (a path, or the `source` given to the parser)."""
        return self._source

    @property
    def unknown_keys(self) -> tuple[str, ...]:
        """Paths of keys the file has that no setting uses (ignored, as Go does; each was logged)."""
        return self._unknown_keys

    @property
    def mapped_topics(self) -> frozenset[str]:
        """Every topic with a mapping."""
        return frozenset(mapping.topic for mapping in self.mappings)

    def mapping_for(self, topic: str) -> MappingConfig | None:
        """The mapping of `topic`, or None when the topic is not mapped (not an error: it is skipped)."""
        return next((mapping for mapping in self.mappings if mapping.topic == topic), None)

    def corrupt_segment_policy_for(self, mapping: MappingConfig) -> CorruptSegmentPolicy:
        """The mapping's corrupt-segment policy, else `runs.corrupt_segment_policy`."""
        return mapping.corrupt_segment_policy or self.runs.corrupt_segment_policy

    def target_file_size_for(self, mapping: MappingConfig) -> int:
        """The mapping's target data-file size in bytes, else `runs.target_file_size_bytes`."""
        return int(mapping.target_file_size_bytes or self.runs.target_file_size_bytes)


def _with_registry_source(mapping: object) -> object:
    """Go derives `schema.source: registry` for a mapping without columns when a registry is configured."""
    if not isinstance(mapping, Mapping):
        return mapping
    schema = mapping.get("schema")
    if schema is None or schema == "":
        schema = {}
    if not isinstance(schema, Mapping) or schema.get("source") not in (None, "") or schema.get("columns"):
        return mapping
    return {**mapping, "schema": {**schema, "source": "registry"}}


# --------------------------------------------------------------------------------------------------
# Loading


class _GoYamlLoader(yaml.SafeLoader):
    """Reads scalars as text and lets the schema type them, as Go's yaml.v3 does into typed fields.

    So `mode: off` is the string "off" (YAML 1.1 would say False), `region: no` stays "no", and
    `12:30` is not sexagesimal 750. Only null (`~`, `null`, empty) and merge keys are resolved
    implicitly. A key repeated in one mapping is an error, as in yaml.v3.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise ConstructorError(
                        None, None, f"key {key_node.value!r} is repeated in this mapping", key_node.start_mark
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_GoYamlLoader.yaml_implicit_resolvers = {}
_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])


def load_config(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> KafscaleConfig:
    """Read, parse and validate a config file on the local filesystem.

    `environ` (default `os.environ`) supplies the `KAFSCALE_ICEBERG_LFS_*` overrides. Raises
    `ConfigValidationError` (a `ConfigError`) listing every problem. An `s3://` location is read by the
    S3 config adapter, which fetches the text and calls `parse_config`.
    """
    source = os.fspath(path)
    if source.startswith("s3://"):
        raise ConfigValidationError(
            source,
            [
                (
                    "",
                    "load_config reads local files; an s3:// config is fetched by the S3 config adapter, "
                    "which then calls parse_config",
                )
            ],
        )
    try:
        with open(source, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ConfigValidationError(source, [("", f"cannot read the file: {exc.strerror or exc}")]) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigValidationError(source, [("", f"not UTF-8 text (byte {exc.start})")]) from None
    return parse_config(text, source=source, environ=environ)


def parse_config(text: str, *, source: str, environ: Mapping[str, str] | None = None) -> KafscaleConfig:
    """Parse YAML text and validate it; `source` names it in errors and logs (a path or URI).

    Raises `ConfigValidationError` naming the line and column for invalid YAML (never echoing the
    line, which may hold a secret), or listing every invalid key.
    """
    return config_from_mapping(parse_config_yaml(text, source=source), source=source, environ=environ)


def parse_config_yaml(text: str, *, source: str) -> Mapping[str, Any]:
    """The YAML text as raw, not yet validated config data, read the way Go's yaml.v3 reads it.

    For callers that add values before validating (`kafscale_iceberg.deployment`); raises
    `ConfigValidationError` for invalid YAML or a document that is not a mapping.
    """
    try:
        data = yaml.load(text, Loader=_GoYamlLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigValidationError(
            source, [("", f"invalid YAML at {where}{exc.problem or exc.context}")]
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigValidationError(source, [("", f"invalid YAML: {type(exc).__name__}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigValidationError(
            source,
            [
                (
                    "",
                    f"the file must be a YAML mapping of sections (s3, iceberg, mappings, ...), got a "
                    f"{type(data).__name__}",
                )
            ],
        )
    return data


def config_from_mapping(
    data: Mapping[str, Any], *, source: str, environ: Mapping[str, str] | None = None
) -> KafscaleConfig:
    """Validate already-parsed config data (e.g. from YAML or JSON); `source` names it in errors and logs.

    Applies the `KAFSCALE_ICEBERG_LFS_*` overrides from `environ` (default `os.environ`) to every
    mapping, warns about each unknown key, and raises `ConfigValidationError` listing every problem.
    The caller's data is not modified.
    """
    env = os.environ if environ is None else environ
    unknown = tuple(_find_unknown_keys(data, KafscaleConfig, ""))
    overrides, problems = _lfs_env_overrides(env)
    prepared = _apply_lfs_overrides(data, overrides)
    config: KafscaleConfig | None = None
    try:
        config = KafscaleConfig.model_validate(prepared)
    except ValidationError as exc:
        problems += _problems_from(exc)
    if problems or config is None:
        note = f"unknown keys (ignored; check their spelling): {', '.join(unknown)}" if unknown else ""
        # `from None`: pydantic's own error text can carry input values, secrets included.
        raise ConfigValidationError(source, problems, note=note) from None
    for key in unknown:
        logger.warning(
            "config %s: unknown key %s is ignored (check its spelling)",
            source,
            key,
            extra={"config_source": source, "config_key": key},
        )
    config._source = source
    config._unknown_keys = unknown
    return config


def _lfs_env_overrides(env: Mapping[str, str]) -> tuple[dict[str, object], list[tuple[str, str]]]:
    """Parse the `KAFSCALE_ICEBERG_LFS_*` variables; unlike Go, an unparsable one is an error, not ignored."""
    overrides: dict[str, object] = {}
    problems: list[tuple[str, str]] = []
    for variable, key in LFS_ENV_OVERRIDES.items():
        text = env.get(variable, "").strip()
        if not text:
            continue
        value: object
        if key == "mode":
            value = text.lower()
            allowed = get_args(LfsMode)
            if value not in allowed:
                problems.append(
                    (f"${variable}", f"{text!r} is not allowed; allowed values: {', '.join(allowed)}")
                )
                continue
        elif key in {"store_metadata", "validate_checksum"}:
            value = _GO_BOOLS.get(text)
            if value is None:
                problems.append((f"${variable}", f"must be true or false (or 1/0, t/f), got {text!r}"))
                continue
        else:
            try:
                value = int(text, 10)
            except ValueError:
                problems.append((f"${variable}", f"must be a whole number, got {text!r}"))
                continue
        overrides[key] = value
    return overrides, problems


# strconv.ParseBool's accepted spellings.
_GO_BOOLS: Mapping[str, bool] = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def _apply_lfs_overrides(data: Mapping[str, Any], overrides: Mapping[str, object]) -> Mapping[str, Any]:
    mappings = data.get("mappings")
    if not overrides or not isinstance(mappings, list):
        return data
    updated: list[object] = []
    for mapping in mappings:
        if not isinstance(mapping, Mapping):
            updated.append(mapping)
            continue
        lfs = mapping.get("lfs")
        lfs = dict(lfs) if isinstance(lfs, Mapping) else {}
        updated.append({**mapping, "lfs": {**lfs, **overrides}})
    return {**data, "mappings": updated}


def _model_of(annotation: object) -> tuple[type[BaseModel], bool] | None:
    """The config model an annotation holds, and whether it is a list of them; None for plain values."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _model_of(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
        return None
    if origin in (tuple, list):
        inner = _model_of(get_args(annotation)[0])
        return (inner[0], True) if inner is not None else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None


def _find_unknown_keys(data: object, model: type[BaseModel], path: str) -> list[str]:
    """Paths of keys in raw `data` that `model` (recursively) has no field for."""
    if not isinstance(data, Mapping):
        return []
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    found: list[str] = []
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        field = fields.get(key) if isinstance(key, str) else None
        if field is None:
            found.append(key_path)
            continue
        nested = _model_of(field.annotation)
        if nested is None:
            continue
        nested_model, is_list = nested
        if is_list and isinstance(value, list):
            for index, item in enumerate(value):
                found += _find_unknown_keys(item, nested_model, f"{key_path}[{index}]")
        elif not is_list:
            found += _find_unknown_keys(value, nested_model, key_path)
    return found


def _format_key(location: tuple[int | str, ...], relative: str = "") -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    if relative:
        text += relative if relative.startswith("[") or not text else f".{relative}"
    return text


def _allowed_values_at(location: tuple[int | str, ...]) -> tuple[str, ...]:
    """The Literal values allowed at a key path, when its setting is an enumeration."""
    annotation: object = KafscaleConfig
    for part in location:
        nested = _model_of(annotation)
        if nested is None:
            return ()
        model, is_list = nested
        if is_list and isinstance(part, int):
            annotation = model
            continue
        fields = {field.alias or name: field for name, field in model.model_fields.items()}
        if not isinstance(part, str) or part not in fields:
            return ()
        annotation = fields[part].annotation
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return tuple(str(member.value) for member in annotation)
    return tuple(str(value) for value in get_args(annotation)) if get_origin(annotation) is Literal else ()


def _show(value: object, location: tuple[int | str, ...]) -> str:
    if any(part in _SECRET_KEYS for part in location):
        return "a value that is not shown (the key may hold a secret)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_BUILTIN_PROBLEMS: Mapping[str, Callable[[dict[str, Any], str], str]] = {
    "literal_error": lambda ctx, got: f"{got} is not allowed; allowed values: {ctx.get('expected', '')}",
    "enum": lambda ctx, got: f"{got} is not allowed; allowed values: {ctx.get('expected', '')}",
    "int_parsing": lambda _, got: f"must be a whole number, got {got}",
    "int_type": lambda _, got: f"must be a whole number, got {got}",
    "int_from_float": lambda _, got: f"must be a whole number, got {got}",
    "bool_parsing": lambda _, got: f"must be true or false, got {got}",
    "bool_type": lambda _, got: f"must be true or false, got {got}",
    "string_type": lambda _, got: f"must be a string, got {got}",
    "tuple_type": lambda _, got: f"must be a list, got {got}",
    "list_type": lambda _, got: f"must be a list, got {got}",
    "model_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "model_attributes_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "dict_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "mapping_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "greater_than": lambda ctx, got: f"must be > {ctx.get('gt')}, got {got}",
    "greater_than_equal": lambda ctx, got: f"must be >= {ctx.get('ge')}, got {got}",
    "byte_size": lambda _, got: f"must be a size in bytes (a number, or e.g. 128MiB, 1GiB), got {got}",
    "byte_size_unit": lambda _, got: (
        f"must be a size in bytes with a known unit (B, KiB, MiB, GiB, KB, MB, GB), got {got}"
    ),
}


def _problems_from(exc: ValidationError) -> list[tuple[str, str]]:
    """Translate pydantic's errors into (key path, problem) lines, every one, secrets never shown."""
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        location = tuple(error["loc"])
        context = error.get("ctx") or {}
        kind = error["type"]
        if kind == _SECTION_PROBLEMS:
            problems += [
                (_format_key(location, relative), problem) for relative, problem in context["problems"]
            ]
        elif kind == _VALUE_PROBLEM:
            problems.append((_format_key(location), str(context["message"])))
        elif kind == "missing":
            allowed = _allowed_values_at(location)
            problems.append(
                (
                    _format_key(location),
                    "is required" + (f"; allowed values: {', '.join(allowed)}" if allowed else ""),
                )
            )
        else:
            got = _show(error.get("input"), location)
            describe = _BUILTIN_PROBLEMS.get(kind)
            problem = describe(context, got) if describe else f"{error['msg']}, got {got}"
            problems.append((_format_key(location), problem))
    return problems


STRICT_CONFIG_FLAG = "--strict-config"


def require_known_keys(config: KafscaleConfig) -> None:
    """Raise `ConfigValidationError` listing every unknown key (`--strict-config`): a typo such as
    `create_tabel_if_missing` fails at start instead of being a warning while the key's default applies."""
    if config.unknown_keys:
        raise ConfigValidationError(
            config.source,
            [
                (key, "unknown key (check its spelling; --strict-config refuses it)")
                for key in config.unknown_keys
            ],
        )
