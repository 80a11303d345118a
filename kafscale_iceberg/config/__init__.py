"""The YAML configuration: every key of KafScale's Go Iceberg processor, plus this product's own keys.

Loaded and validated once, at the edge; inside the program the frozen models are passed around as
typed values. Every key, default and rule is documented in `docs/configuration.md`.

One entry point per caller:

- a command (`run`, `status`, `maintain`, `replay`) given a path, `file://` or `s3://` URI:
  `load_config_from(location, strict=)`;
- a deployed Lambda function (`$KAFSCALE_ICEBERG_CONFIG`, with the stack's variables and secrets laid
  over the file): `config_from_environment()`; its steps, for tests: `load_deployed_config(location,
  environ)` and `apply_deployment_environment(data, environ, source=)`;
- a file on this machine (tests, benchmarks): `load_config(path)`;
- YAML text: `parse_config(text, source=)` (`parse_config_yaml` stops before validation);
- data already parsed (the demo, tests, benchmarks): `config_from_mapping(data, source=)`.

Each raises `ConfigValidationError` listing every problem by key path; `require_known_keys` refuses
the unknown keys a config was loaded with (`--strict-config`).

Where things are: `base` (`_Section` and the validation helpers), `sections` (the top-level
sections), `mappings` (`mappings[]` and its sub-sections), `model` (`KafscaleConfig`, the rules
across sections), `loading` (YAML, environment overrides, validation), `problems` (pydantic errors
to key-path lines, unknown keys), `deployment` (the deployed stack's overlay).

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

Only pydantic, PyYAML and pure modules of this package are imported: this package is on the Lambda
cold-start path (the S3 reader of `load_config_from`/`config_from_environment` is imported when
called). Enumerations a run plan also carries (`ColumnType`, `PartitionTransform`, `SchemaMode`,
`CorruptSegmentPolicy`) and `PartitionField` are the `domain.runs` types, so config values go into
plans as they are; the settings only the config knows are string Literals.
"""

from kafscale_iceberg.config.base import (
    DEAD_LETTER_SUFFIX,
    DEFAULT_EMR_RELEASE_LABEL,
    DEFAULT_RUNS_DIRECTORY,
    DEFAULT_SQLITE_PATH,
    GIB,
    MIB,
    CatalogType,
    DiscoveryMode,
    LfsMode,
    OffsetsBackend,
    PositiveByteSize,
    RunnerType,
    SchemaSource,
    StringMap,
)
from kafscale_iceberg.config.deployment import (
    CATALOG_SECRET_ENV,
    CONFIG_ENV,
    DEPLOYMENT_VARIABLES,
    ETCD_SECRET_ENV,
    DeploymentVariable,
    SecretSource,
    apply_deployment_environment,
    config_from_environment,
    load_deployed_config,
)
from kafscale_iceberg.config.loading import (
    LFS_ENV_OVERRIDES,
    STRICT_CONFIG_FLAG,
    config_from_mapping,
    load_config,
    load_config_from,
    parse_config,
    parse_config_yaml,
    require_known_keys,
)
from kafscale_iceberg.config.mappings import (
    LFS_METADATA_FIELD_TYPES,
    ColumnConfig,
    LfsConfig,
    MappingConfig,
    MappingSchemaConfig,
)
from kafscale_iceberg.config.model import KafscaleConfig
from kafscale_iceberg.config.sections import (
    CatalogConfig,
    DiscoveryConfig,
    DurationSeconds,
    EmrServerlessRunnerConfig,
    EtcdConfig,
    EtcdTlsConfig,
    IcebergConfig,
    InlineRunnerConfig,
    LambdaRunnerConfig,
    LocalRunnerConfig,
    MaintenanceConfig,
    NotificationsConfig,
    OffsetsConfig,
    ProcessorConfig,
    RegistryConfig,
    RunnerConfig,
    RunsConfig,
    S3Config,
    SchemaConfig,
    TypesConfig,
)
from kafscale_iceberg.domain.partitioning import describe_partition_field

__all__ = [
    "CATALOG_SECRET_ENV",
    "CONFIG_ENV",
    "DEAD_LETTER_SUFFIX",
    "DEFAULT_EMR_RELEASE_LABEL",
    "DEFAULT_RUNS_DIRECTORY",
    "DEFAULT_SQLITE_PATH",
    "DEPLOYMENT_VARIABLES",
    "ETCD_SECRET_ENV",
    "GIB",
    "LFS_ENV_OVERRIDES",
    "LFS_METADATA_FIELD_TYPES",
    "MIB",
    "STRICT_CONFIG_FLAG",
    "CatalogConfig",
    "CatalogType",
    "ColumnConfig",
    "DeploymentVariable",
    "DiscoveryConfig",
    "DiscoveryMode",
    "DurationSeconds",
    "EmrServerlessRunnerConfig",
    "EtcdConfig",
    "EtcdTlsConfig",
    "IcebergConfig",
    "InlineRunnerConfig",
    "KafscaleConfig",
    "LambdaRunnerConfig",
    "LfsConfig",
    "LfsMode",
    "LocalRunnerConfig",
    "MaintenanceConfig",
    "MappingConfig",
    "MappingSchemaConfig",
    "NotificationsConfig",
    "OffsetsBackend",
    "OffsetsConfig",
    "PositiveByteSize",
    "ProcessorConfig",
    "RegistryConfig",
    "RunnerConfig",
    "RunnerType",
    "RunsConfig",
    "S3Config",
    "SchemaConfig",
    "SchemaSource",
    "SecretSource",
    "StringMap",
    "TypesConfig",
    "apply_deployment_environment",
    "config_from_environment",
    "config_from_mapping",
    "describe_partition_field",
    "load_config",
    "load_config_from",
    "load_deployed_config",
    "parse_config",
    "parse_config_yaml",
    "require_known_keys",
]
