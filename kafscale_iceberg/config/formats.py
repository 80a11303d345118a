"""Record formats in the config: the top-level `schema_registry` section, and the checks of a mapping's
`value_format`, `value_subject`, `value_message`, `key_format`, `key_subject` and `key_message` (the
keys are on `MappingConfig`, which hands them in as `MappingFormats`). What each format can do is its
spec's answer (`domain/value_formats.py`); no rule here names a format."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from kafscale_iceberg.config.base import _invalid, _lowercase, _Problems, _Section
from kafscale_iceberg.domain.runs import KEY_COLUMN_PREFIX, RegistrySettings, RegistryType
from kafscale_iceberg.domain.value_formats import ValueFormatSpec, key_format_name, names_of


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


@dataclass(frozen=True, kw_only=True)
class MappingFormats:
    """What the format rules read of a mapping: its format keys and the keys they constrain
    (`MappingConfig` builds it; paths in problems are relative to the mapping)."""

    value_format: ValueFormatSpec
    value_subject: str
    value_message: str
    key_format: ValueFormatSpec | None
    key_subject: str
    key_message: str
    schema_source: str
    column_names: tuple[str, ...]
    lfs_on: bool
    upsert: bool
    routed: bool


def format_problems(mapping: MappingFormats) -> _Problems:
    """What is wrong with a mapping's format keys: each rule asks the formats' specs."""
    problems = _Problems()
    value_format = mapping.value_format
    _add_key_format_problems(mapping, problems)
    if mapping.value_subject and not value_format.registered:
        problems.add(
            "value_subject",
            f"applies to {names_of(lambda f: f.registered)} values, not {value_format.name}",
        )
    if mapping.value_message and not value_format.named_message:
        problems.add("value_message", f"applies to {names_of(lambda f: f.named_message)} values only")
    if not value_format.self_described:
        return problems
    if mapping.schema_source in ("registry", "infer"):
        problems.add(
            "schema.source",
            f"must be 'none' (columns from the records' own schemas, evolving) or 'mapping' (columns "
            f"listed, fields projected onto them by name) with value_format {value_format.name}",
        )
    if mapping.lfs_on:
        problems.add("lfs.mode", f"must be off with value_format {value_format.name}")
    if mapping.upsert and not value_format.upsert:
        problems.add(
            "upsert",
            f"is not supported with value_format {value_format.name} yet (upsert reads "
            f"{names_of(lambda f: f.upsert)} values)",
        )
    return problems


def _add_key_format_problems(mapping: MappingFormats, problems: _Problems) -> None:
    """A decoded `key_format` fills the listed `key_` columns (`KEY_COLUMN_PREFIX`) from the keys."""
    key_format = mapping.key_format
    key_name = key_format_name(key_format)
    if mapping.key_subject and (key_format is None or not key_format.registered):
        problems.add("key_subject", f"applies to {names_of(lambda f: f.registered)} keys, not {key_name}")
    if mapping.key_message and (key_format is None or not key_format.named_message):
        problems.add("key_message", f"applies to {names_of(lambda f: f.named_message)} keys only")
    if key_format is None:
        return
    listed = [name for name in mapping.column_names if name.startswith(KEY_COLUMN_PREFIX)]
    from_schemas = mapping.value_format.self_described and mapping.schema_source == "none"
    if from_schemas and not key_format.self_described:
        problems.add(
            "key_format",
            f"{key_name} keys name no schema to take columns from: list the key's fields as "
            f"'{KEY_COLUMN_PREFIX}<field>' columns (schema.source: mapping), or keep key_format raw",
        )
    elif not from_schemas and (mapping.schema_source != "mapping" or not listed):
        problems.add(
            "key_format",
            f"{key_name} keys are read into the columns schema.columns lists as "
            f"'{KEY_COLUMN_PREFIX}<field>' (schema.source: mapping), or, with a self-described "
            "value_format and no schema.source, into columns from the keys' schemas; list the key's fields",
        )
    for key, used in (("route", mapping.routed), ("upsert", mapping.upsert)):
        if used:
            problems.add(key, f"is not supported with key_format {key_name} yet (keys are kept raw)")
    if mapping.lfs_on:
        problems.add("lfs.mode", f"must be off with key_format {key_name}")
