"""`mappings[].mode: upsert` and `mappings[].upsert`: what an upsert mapping may be, each refusal naming
its YAML key, and what a run plan carries."""

from __future__ import annotations

from typing import Any

import pytest

from kafscale_iceberg.domain.runs import CdcFormat, UpsertSettings
from tests.test_config import load, minimal, problems_of


def upsert_mapping(**changes: Any) -> dict[str, Any]:
    data = minimal()
    mapping = {
        "topic": "customers",
        "table": "crm.customers",
        "mode": "upsert",
        "upsert": {"key": ["id"]},
        "schema": {
            "columns": [
                {"name": "id", "type": "long", "required": True},
                {"name": "region", "type": "string", "required": True},
                {"name": "name", "type": "string"},
                {"name": "score", "type": "double", "required": True},
            ]
        },
    }
    mapping.update(changes)
    data["mappings"] = [mapping]
    return data


def test_an_upsert_mapping_loads_with_the_documented_defaults() -> None:
    mapping = load(upsert_mapping()).mappings[0]
    assert mapping.mode == "upsert"
    assert mapping.upsert is not None
    assert mapping.upsert.to_settings() == UpsertSettings(
        key=("id",), cdc=CdcFormat.NONE, delete_on_tombstone=True
    )


def test_a_one_column_key_may_be_given_as_text_and_cdc_ignores_case() -> None:
    mapping = load(upsert_mapping(upsert={"key": "id", "cdc": "Debezium", "delete_on_tombstone": False}))
    settings = mapping.mappings[0].upsert.to_settings()  # type: ignore[union-attr]
    assert settings == UpsertSettings(key=("id",), cdc=CdcFormat.DEBEZIUM, delete_on_tombstone=False)


def test_mode_append_is_still_the_default_and_carries_no_upsert() -> None:
    mapping = load(minimal()).mappings[0]
    assert mapping.mode == "append"
    assert mapping.upsert is None


def test_upsert_mode_needs_a_key() -> None:
    assert "is required with mode: upsert" in problems_of(upsert_mapping(upsert={}))["mappings[0].upsert.key"]


def test_an_upsert_section_without_upsert_mode_is_refused_not_ignored() -> None:
    problems = problems_of(upsert_mapping(mode="append"))
    assert problems["mappings[0].upsert"].startswith("is only read with mode: upsert")


def test_unknown_cdc_format_is_refused() -> None:
    problems = problems_of(upsert_mapping(upsert={"key": ["id"], "cdc": "maxwell"}))
    assert (
        problems["mappings[0].upsert.cdc"] == "'maxwell' is not allowed; allowed values: 'none' or 'debezium'"
    )


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("missing", "'missing' is not a column of schema.columns (id, region, name, score)"),
        ("name", "column 'name' must be required (required: true)"),
        ("score", "column 'score' is double, which cannot be a key column"),
    ],
)
def test_key_columns_are_required_columns_of_the_mapping(key: str, problem: str) -> None:
    problems = problems_of(upsert_mapping(upsert={"key": ["id", key]}))
    assert problems["mappings[0].upsert.key[1]"].startswith(problem)


def test_a_key_column_listed_twice_is_refused() -> None:
    problems = problems_of(upsert_mapping(upsert={"key": ["id", "id"]}))
    assert problems["mappings[0].upsert.key[1]"] == "'id' is listed twice"


def test_partition_fields_of_an_upsert_table_derive_from_the_key() -> None:
    problems = problems_of(
        upsert_mapping(upsert={"key": ["id", "region"]}, partition_by=["region", "partition"])
    )
    assert (
        "partitions 'partition', which is not a key column (id, region)"
        in problems["mappings[0].partition_by[1]"]
    )
    assert "mappings[0].partition_by[0]" not in problems


@pytest.mark.parametrize("source", ["infer", "none"])
def test_upsert_keys_come_from_listed_columns(source: str) -> None:
    data = upsert_mapping(schema={"source": source})
    assert "must be mapping with mode: upsert" in problems_of(data)["mappings[0].schema.source"]


def test_a_routed_upsert_mapping_is_refused_until_it_is_supported() -> None:
    data = upsert_mapping(table="", route={"field": "region", "tables": {"eu": "crm.customers_eu"}})
    assert "not supported with mode: upsert yet" in problems_of(data)["mappings[0].route"]


def test_upsert_with_lfs_is_refused_until_it_is_supported() -> None:
    data = upsert_mapping(lfs={"mode": "resolve"})
    data["s3"]["region"] = "eu-west-1"
    assert "must be off with mode: upsert" in problems_of(data)["mappings[0].lfs.mode"]


def test_an_upsert_topic_with_a_second_mapping_is_refused_until_it_is_supported() -> None:
    data = upsert_mapping()
    data["mappings"].append({"topic": "customers", "table": "crm.customers_log"})
    assert "not supported yet for a topic with several mappings" in problems_of(data)["mappings[1].mode"]


def test_the_docs_example_of_an_upsert_mapping_loads() -> None:
    """docs/configuration.md, "Keyed upsert and CDC": the YAML example is a valid mapping."""
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    section = text.split("## Keyed upsert and CDC", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    data = minimal()
    data["mappings"] = yaml.safe_load(example)["mappings"]
    mapping = load(data).mappings[0]
    assert mapping.upsert is not None
    assert mapping.upsert.to_settings() == UpsertSettings(key=("id",), cdc=CdcFormat.DEBEZIUM)
