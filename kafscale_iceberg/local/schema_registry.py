"""An in-process schema registry serving the Confluent REST API's read side over HTTP on loopback.

`kafscale-iceberg demo` runs on embedded local defaults with no server to install, so its Avro topic's
schemas are served from here (`schema_registry.url` points at it), and the tests use it as the
stand-in for a real registry (none installs on these machines: Confluent's and Karapace need Java or
Kafka, Redpanda a container). It answers `GET /schemas/ids/{id}` (with `schemaType` and
`references`, and the serialized form of a Protobuf schema given one, for `?format=serialized`),
`GET /subjects/{subject}/versions/latest` and `/versions/{n}`, with Confluent's error bodies (40403
for an unknown id, 40401 for an unknown subject), optional basic or bearer auth, and a switch to make
it answer 5xx (an outage). It registers nothing over HTTP: schemas are put in with `register` (or
copied from a confluent-kafka client's registry, e.g. its in-process `mock://` one, with
`register_from`). Not a registry to run in production: no persistence, no compatibility checks.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


@dataclass
class StandInRegistry:
    """What the stand-in serves, and what it was asked."""

    url: str = ""
    schemas: dict[int, dict[str, Any]] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    basic: tuple[str, str] | None = None
    token: str | None = None
    failing: bool = False
    requests: list[str] = field(default_factory=list)
    serialized: dict[int, str] = field(default_factory=dict)
    """Per id, what `?format=serialized` answers (a registry without it answers the text again)."""

    def register(
        self,
        subject: str,
        schema: str,
        *,
        schema_type: str = "AVRO",
        schema_id: int | None = None,
        references: list[dict[str, Any]] | None = None,
    ) -> int:
        """Register `schema` under `subject` (a new version) with its `references`; its id."""
        for known_id, known in self.schemas.items():
            if known["schema"] == schema and known["schemaType"] == schema_type:
                schema_id = known_id
        if schema_id is None:
            schema_id = max(self.schemas, default=0) + 1
        self.schemas[schema_id] = {
            "schema": schema,
            "schemaType": schema_type,
            "references": references or [],
        }
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def register_from(self, client: Any, subject: str) -> None:
        """Copy `subject`'s versions from a confluent-kafka `SchemaRegistryClient` (e.g. `mock://`)."""
        for version in client.get_versions(subject):
            registered = client.get_version(subject, version)
            schema = registered.schema
            self.register(
                subject,
                schema.schema_str,
                schema_type=schema.schema_type or "AVRO",
                schema_id=registered.schema_id,
                references=[
                    {"name": r.name, "subject": r.subject, "version": r.version}
                    for r in schema.references or ()
                ],
            )


class _Handler(BaseHTTPRequestHandler):
    registry: StandInRegistry

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        registry = self.registry
        registry.requests.append(self.path)
        if not self._authorized():
            self._answer(401, {"error_code": 40101, "message": "Unauthorized"})
            return
        if registry.failing:
            self._answer(503, {"error_code": 50301, "message": "stand-in outage"})
            return
        path, _, query = self.path.partition("?")
        parts = [unquote(p) for p in path.strip("/").split("/")]
        serialized = "format=serialized" in query
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
            found = registry.schemas.get(int(parts[2]))
            if found is None:
                self._answer(404, {"error_code": 40403, "message": "Schema not found"})
            else:
                self._answer(200, self._formatted(int(parts[2]), found, serialized))
            return
        if len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions":
            versions = registry.subjects.get(parts[1])
            number = (
                len(versions or ()) if parts[3] == "latest" else int(parts[3]) if parts[3].isdigit() else 0
            )
            if not versions or not 1 <= number <= len(versions):
                self._answer(404, {"error_code": 40401, "message": "Subject or version not found"})
                return
            schema_id = versions[number - 1]
            found = self._formatted(schema_id, registry.schemas[schema_id], serialized)
            self._answer(200, {"subject": parts[1], "version": number, "id": schema_id, **found})
            return
        self._answer(404, {"error_code": 404, "message": "not a stand-in endpoint"})

    def _formatted(self, schema_id: int, found: dict[str, Any], serialized: bool) -> dict[str, Any]:
        if serialized and schema_id in self.registry.serialized:
            return {**found, "schema": self.registry.serialized[schema_id]}
        return found

    def _authorized(self) -> bool:
        registry = self.registry
        header = self.headers.get("Authorization", "")
        if registry.token is not None:
            return header == f"Bearer {registry.token}"
        if registry.basic is not None:
            expected = base64.b64encode(":".join(registry.basic).encode()).decode()
            return header == f"Basic {expected}"
        return True

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve_registry() -> Iterator[StandInRegistry]:
    """A registry on a free loopback port (its `url` set), served from a thread until the block ends."""
    registry = StandInRegistry()
    handler = type("Handler", (_Handler,), {"registry": registry})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    registry.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="schema-registry", daemon=True
    )
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
