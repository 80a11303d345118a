"""The JSON-schema registry: columns derived like KafScale's processor; HTTP fetch with cache and errors."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from kafscale_iceberg.adapters.http_registry import HttpSchemaRegistry
from kafscale_iceberg.domain.registry import columns_from_json_schema
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.exceptions import RegistryUnavailableError, SchemaNotFoundError

ORDERS = {
    "type": "object",
    "properties": {
        "total": {"type": "number"},
        "order_id": {"type": "integer"},
        "status": {"type": ["null", "string"]},
        "paid": {"type": "boolean"},
        "items": {"type": "array"},
        "customer": {"type": "object"},
        "offset": {"type": "integer"},
    },
    "required": ["order_id"],
}


def test_columns_follow_the_go_processor_rules() -> None:
    assert columns_from_json_schema(ORDERS) == (
        ColumnSpec(name="order_id", type=ColumnType.LONG, required=True),
        ColumnSpec(name="paid", type=ColumnType.BOOLEAN),
        ColumnSpec(name="status", type=ColumnType.STRING),
        ColumnSpec(name="total", type=ColumnType.DOUBLE),
    )
    assert columns_from_json_schema({"type": "object"}) == ()


class _Registry(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        if self.path == "/orders.json":
            body, status = json.dumps(ORDERS).encode(), 200
        elif self.path == "/broken.json":
            body, status = b"oops", 500
        elif self.path == "/notjson.json":
            body, status = b"{", 200
        else:
            body, status = b"missing", 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    _Registry.hits = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_fetches_and_caches_schemas(registry_url: str) -> None:
    now = [0.0]
    registry = HttpSchemaRegistry(registry_url, timeout_seconds=2, cache_seconds=300, clock=lambda: now[0])
    assert registry.schema_for("orders") == ORDERS
    assert registry.schema_for("orders") == ORDERS
    assert _Registry.hits == ["/orders.json"]
    now[0] = 301.0
    registry.schema_for("orders")
    assert _Registry.hits == ["/orders.json", "/orders.json"]


def test_missing_schema_is_terminal_and_says_what_to_do(registry_url: str) -> None:
    registry = HttpSchemaRegistry(registry_url, timeout_seconds=2, cache_seconds=0)
    with pytest.raises(SchemaNotFoundError, match=r"schema\.source") as info:
        registry.schema_for("payments")
    assert not info.value.transient
    with pytest.raises(SchemaNotFoundError, match="invalid JSON"):
        registry.schema_for("notjson")


def test_server_errors_and_unreachable_registries_are_transient(registry_url: str) -> None:
    with pytest.raises(RegistryUnavailableError, match="500") as info:
        HttpSchemaRegistry(registry_url, timeout_seconds=2, cache_seconds=0).schema_for("broken")
    assert info.value.transient
    with pytest.raises(RegistryUnavailableError, match="unreachable"):
        HttpSchemaRegistry("http://127.0.0.1:9", timeout_seconds=1, cache_seconds=0).schema_for("orders")


def test_nested_properties_become_struct_and_list_columns_after_the_go_processors_own() -> None:
    schema = {
        "type": "object",
        "properties": {
            **ORDERS["properties"],  # type: ignore[dict-item]
            "placed_at": {"type": "string", "format": "date-time"},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "since": {"type": "string", "format": "date"},
                    "geo": {"type": "object", "properties": {"lat": {"type": "number"}}},
                    "opaque": {"type": "object"},
                },
            },
            "lines": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string"},
                        "at": {"type": "string", "format": "date-time"},
                    },
                },
            },
            "tags": {"type": ["null", "array"], "items": {"type": "string"}},
        },
        "required": ["order_id", "tags"],
    }
    columns = columns_from_json_schema(schema)
    # The Go processor's columns first, exactly as it makes them (a date-time string stays a string).
    assert columns[:5] == (
        ColumnSpec(name="order_id", type=ColumnType.LONG, required=True),
        ColumnSpec(name="paid", type=ColumnType.BOOLEAN),
        ColumnSpec(name="placed_at", type=ColumnType.STRING),
        ColumnSpec(name="status", type=ColumnType.STRING),
        ColumnSpec(name="total", type=ColumnType.DOUBLE),
    )
    assert [(c.name, c.type_name, c.required) for c in columns[5:]] == [
        ("address", "struct<city: string, since: date, geo: struct<lat: double>>", False),
        ("lines", "list<struct<sku: string, at: timestamp>>", False),
        ("tags", "list<string>", True),
    ]
