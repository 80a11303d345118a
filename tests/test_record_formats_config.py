"""The record-format keys at the edge: `mappings[].value_format`, `value_subject`, `value_message`,
`key_format` and the top-level `schema_registry`, each problem named by its YAML key; and what the
launcher puts in the plan."""

from __future__ import annotations

from typing import Any

import pytest

from kafscale_iceberg.domain.runs import ValueFormat
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
    assert config.mappings[0].value_format is ValueFormat.AVRO
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
        (
            {"value_format": "connect_json", "route": {"field": "kind", "tables": {"a": "shop.a"}}},
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
