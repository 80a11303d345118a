"""The record-format keys at the edge: `mappings[].value_format`, `value_subject`, `value_message`,
`key_format` and the top-level `schema_registry`, each problem named by its YAML key; and what the
launcher puts in the plan."""

from __future__ import annotations

from typing import Any

import pytest

from kafscale_iceberg.domain import value_formats
from tests.test_config import load, minimal, problems_of

REGISTRY = {"url": "https://registry.example.com/", "username": "reader", "password": "s3cret"}


def with_mapping(**keys: Any) -> dict[str, Any]:
    data = minimal()
    data["mappings"] = [{"topic": "orders", "table": "shop.orders", **keys}]
    return data


def test_an_avro_mapping_with_a_registry_loads() -> None:
    data = with_mapping(value_format="AVRO", value_subject="orders-value")
    data["schema_registry"] = REGISTRY
    config = load(data)
    assert config.mappings[0].value_format is value_formats.AVRO
    assert config.schema_registry is not None
    settings = config.schema_registry.settings()
    assert (settings.url, settings.auth) == ("https://registry.example.com", "basic")
    assert "s3cret" not in settings.model_dump_json()  # credentials never travel in the plan


def test_an_avro_mapping_without_a_registry_is_refused_naming_the_key() -> None:
    problems = problems_of(with_mapping(value_format="avro"))
    assert "schema_registry" in problems["mappings[0].value_format"]


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        ({"key_format": "avro"}, "mappings[0].key_format"),
        ({"value_subject": "orders-value"}, "mappings[0].value_subject"),
        ({"value_format": "avro", "value_message": "Order"}, "mappings[0].value_message"),
        ({"value_format": "connect_json", "schema": {"source": "infer"}}, "mappings[0].schema.source"),
        (  # a route is read from decoded values (`test_routed_formats.py`), not yet with decoded keys
            {
                "value_format": "connect_json",
                "key_format": "connect_json",
                "route": {"field": "kind", "tables": {"a": "shop.a"}},
            },
            "mappings[0].route",
        ),
    ],
)
def test_what_a_format_cannot_do_yet_is_refused_naming_the_key(keys: dict[str, Any], key: str) -> None:
    data = with_mapping(**keys)
    data["schema_registry"] = REGISTRY
    assert key in problems_of(data)


def test_a_registry_with_both_a_token_and_a_username_is_refused() -> None:
    data = with_mapping(value_format="avro")
    data["schema_registry"] = {**REGISTRY, "token": "t"}
    assert "schema_registry.token" in problems_of(data)


def test_lenient_mode_needs_no_json_schema_registry_for_self_described_formats() -> None:
    data = with_mapping(value_format="connect_json")
    data["schema"] = {"mode": "lenient"}
    assert load(data).schema_.mode == "lenient"


KEY_COLUMNS = {"columns": [{"name": "key_id", "type": "long"}, {"name": "total", "type": "double"}]}


def test_a_decoded_key_format_with_listed_key_columns_loads() -> None:
    data = with_mapping(key_format="AVRO", key_subject="orders-key", schema=KEY_COLUMNS)
    data["schema_registry"] = REGISTRY
    (mapping,) = load(data).mappings
    assert (mapping.key_format, mapping.key_subject) == (value_formats.AVRO, "orders-key")


@pytest.mark.parametrize(
    ("keys", "key", "problem"),
    [
        (
            {"key_format": "avro", "schema": {"columns": [{"name": "total", "type": "long"}]}},
            "key_format",
            "'key_<field>'",
        ),
        ({"key_format": "json", "value_format": "avro"}, "key_format", "name no schema"),
        ({"key_subject": "orders-key"}, "key_subject", "not raw"),
        (
            {"key_format": "json", "key_subject": "orders-key", "schema": KEY_COLUMNS},
            "key_subject",
            "not json",
        ),
        (
            {"key_format": "avro", "key_message": "Key", "schema": KEY_COLUMNS},
            "key_message",
            "protobuf keys only",
        ),
        (
            {"key_format": "json", "schema": KEY_COLUMNS, "upsert": {"key": ["key_id"]}},
            "upsert",
            "not supported",
        ),
        (
            {"key_format": "json", "schema": KEY_COLUMNS, "lfs": {"mode": "resolve"}},
            "lfs.mode",
            "must be off",
        ),
    ],
)
def test_what_a_decoded_key_cannot_do_is_refused_naming_the_key(
    keys: dict[str, Any], key: str, problem: str
) -> None:
    data = with_mapping(**keys)
    data["schema_registry"] = REGISTRY
    assert problem in problems_of(data)[f"mappings[0].{key}"]


def test_a_registered_key_format_without_a_registry_is_refused_naming_the_key() -> None:
    problems = problems_of(with_mapping(key_format="protobuf", schema=KEY_COLUMNS))
    assert "needs the top-level schema_registry" in problems["mappings[0].key_format"]
