"""A Confluent-compatible schema registry over its REST API (Confluent, Redpanda, Apicurio's ccompat
API, Karapace): `GET /schemas/ids/{id}` and `GET /subjects/{subject}/versions/latest`.

A schema by id is immutable: cached for the process's life. A subject's latest version is cached for
`cache_seconds`; a subject's numbered version (what a Protobuf schema's `references` name) is
immutable too. A Protobuf schema is asked for again with `?format=serialized` (its compiled
`FileDescriptorProto`, base64) where the registry gives that (Confluent does); a registry that
answers with the `.proto` text again, or refuses the parameter, leaves the text (the decoder then
compiles it). Basic (`username`/`password`) or bearer (`token`) auth, a request timeout, and TLS
with a private CA (`tls_ca_pem`) besides the system's. Errors: 404 (or the registry's 40403 / 40401
codes) -> `SchemaNotFoundError`; 401/403 -> `RegistryAuthError`; unreachable, timeout, 5xx ->
`RegistryUnavailableError` (transient). Secrets are never logged or put in messages.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import overload

from kafscale_iceberg.adapters.registry_memo import SchemaMemo
from kafscale_iceberg.domain.record_schemas import RegisteredSchema, SchemaId, SchemaReference
from kafscale_iceberg.domain.runs import RegistrySettings
from kafscale_iceberg.exceptions import RegistryAuthError, RegistryUnavailableError, SchemaNotFoundError

REGISTRY_CREDENTIAL_VARIABLES = (
    "KAFSCALE_ICEBERG_REGISTRY_USERNAME",
    "KAFSCALE_ICEBERG_REGISTRY_PASSWORD",
    "KAFSCALE_ICEBERG_REGISTRY_TOKEN",
)
"""How a one-machine `spark-submit` run gets the registry credentials (environment, not arguments)."""


@dataclass(frozen=True)
class RegistryCredentials:
    """What the registry takes: basic auth (`username`, `password`) or a bearer `token`."""

    username: str = ""
    password: str = ""
    token: str = ""

    def __repr__(self) -> str:
        return f"RegistryCredentials(username={self.username!r}, password=***, token=***)"

    def as_environment(self) -> dict[str, str]:
        """The credentials as `REGISTRY_CREDENTIAL_VARIABLES` (for a `spark-submit` child process)."""
        username, password, token = REGISTRY_CREDENTIAL_VARIABLES
        return {username: self.username, password: self.password, token: self.token}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> RegistryCredentials | None:
        """The credentials `as_environment` set, or None when none is set."""
        username, password, token = (environ.get(v, "") for v in REGISTRY_CREDENTIAL_VARIABLES)
        if not (username or token):
            return None
        return cls(username=username, password=password, token=token)


class ConfluentSchemaRegistry:
    """A `RecordSchemaRegistry` over the Confluent REST API; safe to share between threads."""

    def __init__(
        self,
        settings: RegistrySettings,
        credentials: RegistryCredentials | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base = settings.url.rstrip("/")
        self._timeout = settings.timeout_seconds
        self._headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        credentials = credentials or RegistryCredentials()
        if credentials.token:
            self._headers["Authorization"] = f"Bearer {credentials.token}"
        elif credentials.username:
            pair = f"{credentials.username}:{credentials.password}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._context: ssl.SSLContext | None = None
        if settings.tls_ca_pem:
            self._context = ssl.create_default_context()
            self._context.load_verify_locations(cadata=settings.tls_ca_pem)
        self._by_id: SchemaMemo[int] = SchemaMemo(clock)
        self._latest: SchemaMemo[str] = SchemaMemo(clock, settings.cache_seconds)
        self._versions: SchemaMemo[tuple[str, int]] = SchemaMemo(clock)

    def schema_by_id(self, schema_id: SchemaId) -> RegisteredSchema:
        """See `RecordSchemaRegistry.schema_by_id` (a Glue schema version id is no id here)."""
        if not isinstance(schema_id, int):
            raise SchemaNotFoundError(
                f"registry {self._base} has integer schema ids, not {schema_id!r} (an AWS Glue schema "
                "version id): set schema_registry.type glue"
            )
        path = f"/schemas/ids/{schema_id}"
        return self._by_id.get(
            schema_id,
            lambda: self._serialized(
                _registered(self._get(path, f"schema id {schema_id}"), schema_id=schema_id), path
            ),
        )

    def schema_version(self, subject: str, version: int) -> RegisteredSchema:
        """See `RecordSchemaRegistry.schema_version`."""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{int(version)}"

        def fetch() -> RegisteredSchema:
            body = self._get(path, f"subject {subject!r} version {version}")
            schema_id = body.get("id")
            return self._serialized(
                _registered(body, schema_id=schema_id if isinstance(schema_id, int) else 0), path
            )

        return self._versions.get((subject, version), fetch)

    def _serialized(self, schema: RegisteredSchema, path: str) -> RegisteredSchema:
        """A Protobuf schema's serialized form where the registry gives it (see the module docstring)."""
        if schema.schema_type.upper() != "PROTOBUF":
            return schema
        body = self._get(f"{path}?format=serialized", f"{schema.label} (serialized)", refusable=True)
        if body is None:
            return schema
        return dataclasses.replace(schema, text=str(body["schema"]))

    def latest_schema(self, subject: str) -> RegisteredSchema:
        """See `RecordSchemaRegistry.latest_schema`."""

        def fetch() -> RegisteredSchema:
            quoted = urllib.parse.quote(subject, safe="")
            body = self._get(f"/subjects/{quoted}/versions/latest", f"subject {subject!r}")
            schema_id = body.get("id")
            if not isinstance(schema_id, int):
                raise SchemaNotFoundError(
                    f"registry {self._base}: subject {subject!r} has no schema id in its answer"
                )
            return self._serialized(_registered(body, schema_id=schema_id), f"/schemas/ids/{schema_id}")

        schema = self._latest.get(subject, fetch)
        self._by_id.remember(int(schema.schema_id), schema)
        return schema

    @overload
    def _get(self, path: str, what: str) -> dict[str, object]: ...

    @overload
    def _get(self, path: str, what: str, *, refusable: bool) -> dict[str, object] | None: ...

    def _get(self, path: str, what: str, *, refusable: bool = False) -> dict[str, object] | None:
        """The answer's JSON; with `refusable`, None where the registry refuses the request (4xx but
        401/403: a parameter it does not know) instead of an error."""
        url = self._base + path
        request = urllib.request.Request(url, headers=self._headers, method="GET")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            if refusable and 400 <= exc.code < 500 and exc.code not in (401, 403):
                return None
            if exc.code == 404:
                raise SchemaNotFoundError(
                    f"registry {self._base} has no {what} (404): register it, or check the producer's "
                    "registry and the mapping's value_subject"
                ) from None
            if exc.code in (401, 403):
                raise RegistryAuthError(
                    f"registry {self._base} refused the credentials for {what} (HTTP {exc.code}): check "
                    "schema_registry.username/password or token"
                ) from None
            raise RegistryUnavailableError(
                f"registry {self._base} answered HTTP {exc.code} for {what}"
            ) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise RegistryUnavailableError(f"registry {self._base} is unreachable for {what}: {exc}") from exc
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RegistryUnavailableError(
                f"registry {self._base} answered {what} with invalid JSON: {exc}"
            ) from exc
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise RegistryUnavailableError(f"registry {self._base} answered {what} without a schema")
        return body


def _registered(body: dict[str, object], *, schema_id: int) -> RegisteredSchema:
    references = body.get("references")
    refs = tuple(
        SchemaReference(
            name=str(r.get("name")), subject=str(r.get("subject")), version=int(r.get("version", 0))
        )
        for r in (references if isinstance(references, list) else ())
        if isinstance(r, dict)
    )
    subject = body.get("subject")
    version = body.get("version")
    return RegisteredSchema(
        schema_id=schema_id,
        schema_type=str(body.get("schemaType") or "AVRO"),
        text=str(body["schema"]),
        references=refs,
        subject=subject if isinstance(subject, str) else None,
        version=version if isinstance(version, int) else None,
    )
