"""The demo's Avro topic: pizzas in Confluent wire format whose schema evolves mid-demo.

Producers write `pizzas` as a Confluent Avro serializer does (a zero byte, the 4-byte schema id, the
Avro binary body), against the in-process registry (`local/schema_registry.py`: the demo has no
server to run one). From offset `EVOLVE_FROM` on they use the schema's second version, which adds an
optional `spicy` field and widens `pizza_id` from `int` to `long` (its ids then pass 2^31). The
mapping lists no columns (`value_format: avro`): the table is created from the first version and
evolves in the commit that brings the second one's records.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable
from typing import Any

EVOLVE_FROM = 150
"""Pizzas from this offset on are written with the schema's second version."""
WIDE_IDS = 3_000_000_000
"""What the second version adds to a pizza's id: beyond `int`, so only a widened column holds it."""
SUBJECT = "pizzas-value"
SCHEMA_IDS = (1, 2)
PIZZA_V1: dict[str, Any] = {
    "type": "record",
    "name": "Pizza",
    "namespace": "shop",
    "fields": [
        {"name": "pizza_id", "type": "int"},
        {"name": "name", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "slices", "type": "int"},
    ],
}
PIZZA_V2: dict[str, Any] = {
    **PIZZA_V1,
    "fields": [
        {"name": "pizza_id", "type": "long"},
        *PIZZA_V1["fields"][1:],
        {"name": "spicy", "type": ["null", "boolean"], "default": None},
    ],
}
FIRST_COLUMNS = {"pizza_id": "int", "name": "string", "price": "double", "slices": "int"}
"""The table's columns from the schema's first version (base fields aside)."""
EVOLVED_COLUMNS = {**FIRST_COLUMNS, "pizza_id": "long", "spicy": "boolean"}
"""The table's columns after the evolution."""
NAMES = ("margherita", "diavola", "funghi", "quattro formaggi", "marinara")


def pizza(rng: random.Random, offset: int, at_ms: int) -> dict[str, Any]:
    """A pizza as the producer of `offset` writes it (the second version's fields from `EVOLVE_FROM`)."""
    value: dict[str, Any] = {
        "pizza_id": offset,
        "name": rng.choice(NAMES),
        "price": round(rng.uniform(6, 18), 2),
        "slices": rng.choice((6, 8)),
    }
    if offset >= EVOLVE_FROM:
        value["pizza_id"] += WIDE_IDS
        value["spicy"] = rng.random() < 0.3
    return value


def register_schemas(registry: Any) -> None:
    """The two versions of the pizza schema, under `SUBJECT` with the ids the encoder writes."""
    import json  # noqa: PLC0415

    for schema_id, schema in zip(SCHEMA_IDS, (PIZZA_V1, PIZZA_V2), strict=True):
        registry.register(SUBJECT, json.dumps(schema), schema_id=schema_id)


def wire_encoder() -> Callable[[dict[str, Any], int], bytes]:
    """Encodes a pizza of an offset in Confluent wire format with its schema version (fastavro)."""
    import fastavro  # noqa: PLC0415 - only the demo's Avro topic needs it

    parsed = [fastavro.parse_schema(PIZZA_V1), fastavro.parse_schema(PIZZA_V2)]

    def encode(value: dict[str, Any], offset: int) -> bytes:
        version = 1 if offset >= EVOLVE_FROM else 0
        body = io.BytesIO()
        body.write(b"\x00" + struct.pack(">I", SCHEMA_IDS[version]))
        fastavro.schemaless_writer(body, parsed[version], value)
        return body.getvalue()

    return encode


def check_evolution(
    columns: dict[str, str], rows: list[dict[str, Any]], offsets: set[tuple[int, int]]
) -> list[tuple[bool, str]]:
    """The demo's checks of the Avro table: its columns (after the evolution, when the producers got
    to the second version), and each version's values."""
    evolved = sum(1 for _, offset in offsets if offset >= EVOLVE_FROM)
    wanted = EVOLVED_COLUMNS if evolved else FIRST_COLUMNS
    return [
        (
            columns == wanted,
            "pizzas: the table's columns are the schema's"
            + (" after its evolution (spicy added, pizza_id int -> long)" if evolved else " (first version)"),
        ),
        (
            sum(1 for r in rows if r["pizza_id"] >= WIDE_IDS) == evolved
            and sum(1 for r in rows if r.get("spicy") is not None) == evolved,
            f"pizzas: the {evolved} pizzas of the second version have their wide ids and spicy values",
        ),
        (
            all(r["pizza_id"] < 2**31 and r.get("spicy") is None for r in rows if r["offset"] < EVOLVE_FROM),
            f"pizzas: the {len(offsets) - evolved} pizzas of the first version kept their values",
        ),
    ]
