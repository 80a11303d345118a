"""Record formats in the config: the top-level `schema_registry` section, and the checks of a mapping's
`value_format`, `value_subject`, `value_message`, `key_format`, `key_subject` and `key_message` (the
keys are on `MappingConfig`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from kafscale_iceberg.config.base import _invalid, _lowercase, _Problems, _Section
from kafscale_iceberg.domain.runs import (
    KEY_COLUMN_PREFIX,
    KeyFormat,
    RegistrySettings,
    RegistryType,
    ValueFormat,
)

if TYPE_CHECKING:
    from kafscale_iceberg.config.mappings import MappingConfig

DECODED_VALUE_FORMATS = frozenset(
    {
        ValueFormat.JSON,
        ValueFormat.CONNECT_JSON,
        ValueFormat.AVRO,
        ValueFormat.PROTOBUF,
        ValueFormat.JSON_SCHEMA,
    }
)
"""The value formats this version decodes (the others are refused at the edge, not accepted silently)."""
UPSERT_VALUE_FORMATS = frozenset({ValueFormat.JSON, ValueFormat.CONNECT_JSON, ValueFormat.AVRO})
"""The value formats `mode: upsert` reads (Debezium's JSON, JsonConverter and Avro converter outputs)."""


class RegistryTlsConfig(_Section):
    """`schema_registry.tls`: a private CA (PEM file) to trust besides the system's, as `etcd.tls`."""

    ca_file: str = ""


class SchemaRegistryConfig(_Section):
    """`schema_registry`: where record schemas are read from. `type: confluent` (default): a
    Confluent-compatible registry at `url` (Confluent, Redpanda, Apicurio's ccompat API, Karapace);
    `type: glue`: the AWS Glue Schema Registry `registry_name` (its own record header, credentials
    from the AWS credential chain)."""

    type: Annotated[RegistryType, BeforeValidator(_lowercase)] = RegistryType.CONFLUENT
    url: str = ""
    username: str = ""
    password: SecretStr = SecretStr("")
    token: SecretStr = SecretStr("")
    timeout_seconds: float = Field(default=5.0, gt=0)
    cache_seconds: float = Field(default=300.0, ge=0)
    tls: RegistryTlsConfig = Field(default_factory=RegistryTlsConfig)
    credentials_secret: str = ""
    """AWS: a Secrets Manager secret id the Spark job reads `{"username", "password"}` or `{"token"}` from."""
    registry_name: str = ""
    """Glue: the registry's name."""
    region: str = ""
    """Glue: the registry's region (default: the AWS credential chain's, `AWS_REGION` on AWS)."""
    endpoint: str = ""
    """Glue: the Glue API endpoint (default: Glue's in `region`; a VPC interface endpoint without
    private DNS, or a stand-in)."""

    @field_validator("url", "endpoint")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        if value and not re.match(r"https?://", value):
            raise _invalid(f"must be an http:// or https:// URL, got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_kind_of_credentials(self) -> SchemaRegistryConfig:
        problems = _Problems()
        if self.type is RegistryType.GLUE:
            if not self.registry_name:
                problems.add("registry_name", "is required with type glue (the Glue schema registry's name)")
            confluent_only = {
                "url": self.url,
                "username": self.username,
                "password": self.password.get_secret_value(),
                "token": self.token.get_secret_value(),
                "tls.ca_file": self.tls.ca_file,
                "credentials_secret": self.credentials_secret,
            }
            for key, value in confluent_only.items():
                if value:
                    problems.add(
                        key,
                        "applies to type confluent only: a Glue registry is reached with the AWS "
                        "credential chain (set endpoint for another Glue endpoint)",
                    )
            problems.raise_if_any()
            return self
        for key, value in {
            "registry_name": self.registry_name,
            "region": self.region,
            "endpoint": self.endpoint,
        }.items():
            if value:
                problems.add(key, "applies to type glue only")
        if not self.url:
            problems.add("url", "is required (e.g. http://schema-registry:8081)")
        if self.token.get_secret_value() and self.username:
            problems.add("token", "and username exclude each other: give basic auth or a bearer token")
        if self.username and not self.password.get_secret_value():
            problems.add("password", "is required when username is set")
        if self.tls.ca_file and not Path(self.tls.ca_file).is_file():
            problems.add("tls.ca_file", f"{self.tls.ca_file!r} is not a readable file")
        problems.raise_if_any()
        return self

    def settings(self) -> RegistrySettings:
        """What a run plan carries of it (no secret: credentials travel beside the plan)."""
        if self.type is RegistryType.GLUE:
            return RegistrySettings(
                type=RegistryType.GLUE,
                timeout_seconds=self.timeout_seconds,
                cache_seconds=self.cache_seconds,
                registry_name=self.registry_name,
                region=self.region or None,
                endpoint_url=self.endpoint or None,
            )
        auth = "bearer" if self.token.get_secret_value() else "basic" if self.username else "none"
        if self.credentials_secret:
            auth = "basic"
        return RegistrySettings(
            url=self.url,
            auth=auth,
            timeout_seconds=self.timeout_seconds,
            cache_seconds=self.cache_seconds,
            tls_ca_pem=Path(self.tls.ca_file).read_text() if self.tls.ca_file else None,
            credentials_secret=self.credentials_secret or None,
        )


def format_problems(mapping: MappingConfig) -> _Problems:
    """What is wrong with a mapping's format keys (paths relative to the mapping)."""
    problems = _Problems()
    value_format = mapping.value_format
    if value_format not in DECODED_VALUE_FORMATS:
        problems.add(
            "value_format",
            f"{value_format.value} is not decoded by this version yet (decoded: "
            f"{', '.join(sorted(f.value for f in DECODED_VALUE_FORMATS))})",
        )
    _add_key_format_problems(mapping, problems)
    if mapping.value_subject and not value_format.registered:
        problems.add(
            "value_subject", f"applies to avro, protobuf and json_schema values, not {value_format.value}"
        )
    if mapping.value_message and value_format is not ValueFormat.PROTOBUF:
        problems.add("value_message", "applies to protobuf values only")
    if value_format.self_described:
        if mapping.schema_.source in ("registry", "infer"):
            problems.add(
                "schema.source",
                f"must be 'none' (columns from the records' own schemas, evolving) or 'mapping' (columns "
                f"listed, fields projected onto them by name) with value_format {value_format.value}",
            )
        if mapping.lfs.mode != "off":
            problems.add("lfs.mode", f"must be off with value_format {value_format.value}")
        if mapping.upsert is not None and value_format not in UPSERT_VALUE_FORMATS:
            problems.add(
                "upsert",
                f"is not supported with value_format {value_format.value} yet (upsert reads "
                f"{', '.join(sorted(f.value for f in UPSERT_VALUE_FORMATS))} values)",
            )
    return problems


def _add_key_format_problems(mapping: MappingConfig, problems: _Problems) -> None:
    """A decoded `key_format` fills the listed `key_` columns (`KEY_COLUMN_PREFIX`) from the keys."""
    key_format = mapping.key_format.as_value_format
    if mapping.key_subject and (key_format is None or not key_format.registered):
        problems.add(
            "key_subject", f"applies to avro, protobuf and json_schema keys, not {mapping.key_format.value}"
        )
    if mapping.key_message and key_format is not ValueFormat.PROTOBUF:
        problems.add("key_message", "applies to protobuf keys only")
    if key_format is None:
        return
    listed = [c.name for c in mapping.schema_.columns if c.name.startswith(KEY_COLUMN_PREFIX)]
    from_schemas = mapping.value_format.self_described and mapping.schema_.source == "none"
    if from_schemas and not key_format.self_described:
        problems.add(
            "key_format",
            f"{key_format.value} keys name no schema to take columns from: list the key's fields as "
            f"'{KEY_COLUMN_PREFIX}<field>' columns (schema.source: mapping), or keep key_format raw",
        )
    elif not from_schemas and (mapping.schema_.source != "mapping" or not listed):
        problems.add(
            "key_format",
            f"{key_format.value} keys are read into the columns schema.columns lists as "
            f"'{KEY_COLUMN_PREFIX}<field>' (schema.source: mapping), or, with a value_format other than "
            "json and no schema.source, into columns from the keys' schemas; list the key's fields",
        )
    for key, used in (("route", mapping.route is not None), ("upsert", mapping.upsert is not None)):
        if used:
            problems.add(key, f"is not supported with key_format {key_format.value} yet (keys are kept raw)")
    if mapping.lfs.mode != "off":
        problems.add("lfs.mode", f"must be off with key_format {key_format.value}")


ValueFormatKey = Annotated[ValueFormat, BeforeValidator(_lowercase)]
KeyFormatKey = Annotated[KeyFormat, BeforeValidator(_lowercase)]
