"""The AWS Glue Schema Registry (`schema_registry.type: glue`) behind the `RecordSchemaRegistry` port.

A record's header names a schema version id (a UUID: `dataplane/formats/glue_wire.py`), read with
`GetSchemaVersion(SchemaVersionId=…)`; a subject is a schema's name in `registry_name`: its latest
version (`value_subject`, for records without the header) is `GetSchemaVersion(SchemaId=…,
SchemaVersionNumber={LatestVersion: true})`, cached for `cache_seconds`, a numbered version is
immutable. The schema's `DataFormat` (`AVRO`, `JSON`, `PROTOBUF`) is its type, as a Confluent
registry's `schemaType`. Credentials come from the AWS credential chain (the job's role on AWS);
`region` and `endpoint_url` default to the chain's region and Glue's endpoint there.

A version's `Status` says whether its definition may be read with:

- `AVAILABLE`: yes.
- `PENDING`: Glue is still checking the version against the schema's compatibility mode (the
  serializers wait for it to end before they write with it); transient: `RegistryUnavailableError`,
  the run is retried as in a registry outage, and the version is asked for again then.
- `FAILURE`: the version failed that check and never became a valid version of its schema; its
  records are `unknown_schema` dead letters naming it (`SchemaNotFoundError`): landing them would
  evolve the table with a definition the registry refused.
- `DELETING`: the version is being deleted (`DeleteSchemaVersions`); its records were written while
  it was valid, and its definition still reads them, so they are decoded. A warm task keeps a
  version for its life anyway, so a dead letter here would depend on timing; once Glue no longer has
  the version, its records are `unknown_schema`.

Errors: Glue has no such schema, version or registry (`EntityNotFoundException`) ->
`SchemaNotFoundError`; refused credentials or none (`AccessDeniedException`, no credentials) ->
`RegistryAuthError`; unreachable, timed out, throttled or a server error -> `RegistryUnavailableError`
(transient: the run is retried, nothing is dead-lettered for it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from kafscale_iceberg.adapters.registry_memo import SchemaMemo
from kafscale_iceberg.domain.record_schemas import RegisteredSchema, SchemaId
from kafscale_iceberg.domain.runs import RegistrySettings
from kafscale_iceberg.exceptions import RegistryAuthError, RegistryUnavailableError, SchemaNotFoundError

_AVAILABLE = "AVAILABLE"
_PENDING = "PENDING"
_FAILURE = "FAILURE"
_READABLE = frozenset({_AVAILABLE, "DELETING"})
"""Statuses whose definition reads records (PENDING is transient; FAILURE, or any other, is not)."""
_NOT_FOUND = frozenset({"EntityNotFoundException"})
_REFUSED = frozenset(
    {
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "ExpiredTokenException",
    }
)


class GlueSchemaRegistry:
    """A `RecordSchemaRegistry` over the AWS Glue Schema Registry; safe to share between threads."""

    def __init__(
        self,
        settings: RegistrySettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not settings.registry_name:
            raise ValueError("a Glue schema registry needs its registry_name")
        self._registry = settings.registry_name
        config = Config(
            connect_timeout=settings.timeout_seconds,
            read_timeout=settings.timeout_seconds,
            retries={"mode": "standard", "max_attempts": 2},
        )
        self._client: Any = boto3.session.Session().client(
            "glue", region_name=settings.region, endpoint_url=settings.endpoint_url, config=config
        )
        self._by_id: SchemaMemo[str] = SchemaMemo(clock)
        self._latest: SchemaMemo[str] = SchemaMemo(clock, settings.cache_seconds)
        self._versions: SchemaMemo[tuple[str, int]] = SchemaMemo(clock)

    def schema_by_id(self, schema_id: SchemaId) -> RegisteredSchema:
        """See `RecordSchemaRegistry.schema_by_id`: `schema_id` is a schema version id."""
        version_id = str(schema_id)
        return self._by_id.get(
            version_id, lambda: self._get(f"schema version id {version_id}", SchemaVersionId=version_id)
        )

    def latest_schema(self, subject: str) -> RegisteredSchema:
        """See `RecordSchemaRegistry.latest_schema`: `subject` is the schema's name."""
        schema = self._latest.get(
            subject,
            lambda: self._get(
                f"schema {subject!r} (its latest version)",
                SchemaId={"RegistryName": self._registry, "SchemaName": subject},
                SchemaVersionNumber={"LatestVersion": True},
            ),
        )
        self._by_id.remember(str(schema.schema_id), schema)
        return schema

    def schema_version(self, subject: str, version: int) -> RegisteredSchema:
        """See `RecordSchemaRegistry.schema_version`: version `version` of schema `subject`."""
        return self._versions.get(
            (subject, version),
            lambda: self._get(
                f"schema {subject!r} version {version}",
                SchemaId={"RegistryName": self._registry, "SchemaName": subject},
                SchemaVersionNumber={"VersionNumber": int(version)},
            ),
        )

    def _get(self, what: str, **params: Any) -> RegisteredSchema:
        """`GetSchemaVersion(**params)` as a `RegisteredSchema`; errors as the module docstring says."""
        where = f"Glue schema registry {self._registry!r}"
        try:
            answer = self._client.get_schema_version(**params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = str(error.get("Message", ""))
            if code in _NOT_FOUND:
                raise SchemaNotFoundError(
                    f"{where} has no {what} ({code}: {message}): register it, or check the producer's "
                    "registry and the mapping's value_subject"
                ) from None
            if code in _REFUSED:
                raise RegistryAuthError(
                    f"{where} refused the request for {what} ({code}): the role needs glue:GetSchemaVersion "
                    "on the registry and its schemas"
                ) from None
            raise RegistryUnavailableError(
                f"{where} answered {code or 'an error'} for {what}: {message}"
            ) from exc
        except NoCredentialsError:
            raise RegistryAuthError(
                f"{where}: no AWS credentials found for {what} (the credential chain: environment, "
                "profile, the job's role)"
            ) from None
        except BotoCoreError as exc:
            raise RegistryUnavailableError(f"{where} is unreachable for {what}: {exc}") from exc
        return registered_schema(answer, f"{where}: {what}")


def registered_schema(answer: dict[str, Any], what: str) -> RegisteredSchema:
    """A `GetSchemaVersion` answer for `what` as a `RegisteredSchema`, if its `Status` may be read with
    (see the module docstring): PENDING raises `RegistryUnavailableError`, FAILURE (or a status this
    version does not know) `SchemaNotFoundError`, naming `what` and the version id."""
    status = str(answer.get("Status") or _AVAILABLE)
    if status in _READABLE:
        return _schema_of(answer)
    version_id = str(answer.get("SchemaVersionId"))
    named = what if version_id in what else f"{what} (schema version id {version_id})"
    if status == _PENDING:
        raise RegistryUnavailableError(
            f"{named} is PENDING: Glue is still checking it against the schema's compatibility mode; "
            "the run is retried"
        )
    if status == _FAILURE:
        raise SchemaNotFoundError(
            f"{named} has status FAILURE: it failed the schema's compatibility check and never became "
            "a valid version; register a compatible version, re-produce these records with it, or "
            "replay their dead letters once the producer is fixed"
        )
    raise SchemaNotFoundError(f"{named} has status {status}, which is not one a record can be read with")


def _schema_of(answer: dict[str, Any]) -> RegisteredSchema:
    """The schema's name is the last part of its ARN (`arn:…:schema/{registry}/{name}`)."""
    arn = str(answer.get("SchemaArn", ""))
    version = answer.get("VersionNumber")
    return RegisteredSchema(
        schema_id=str(answer["SchemaVersionId"]),
        schema_type=str(answer.get("DataFormat") or "AVRO"),
        text=str(answer.get("SchemaDefinition", "")),
        subject=arn.rsplit("/", 1)[-1] if "/" in arn else None,
        version=version if isinstance(version, int) else None,
    )
