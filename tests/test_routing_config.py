"""`mappings[].route` and several mappings per topic: what the config accepts, derives and refuses."""

from __future__ import annotations

from typing import Any

import pytest

from kafscale_iceberg.domain.commits import TableMarker, TableState
from kafscale_iceberg.domain.routing import matches_template, template_identifier
from kafscale_iceberg.services.compaction_trigger import SmallFileTrigger
from tests.test_config import load, minimal, problems_of


def routed(**route: Any) -> dict[str, Any]:
    data = minimal()
    data["mappings"] = [{"topic": "orders", "route": {"field": "region", **route}}]
    return data


def test_fixed_routes_with_a_default_table() -> None:
    config = load(
        routed(tables={"eu": "shop.orders_eu", "us": "shop.orders_us"}, default_table="shop.orders")
    )
    mapping = config.mappings[0]
    assert mapping.table == ""
    assert mapping.data_tables == ("shop.orders_eu", "shop.orders_us", "shop.orders")
    assert mapping.dead_letter_table == "shop.orders__dlq"  # the default table's dead letters
    assert config.anchor_table("orders") == "shop.orders"
    assert config.topic_tables("orders") == (
        "shop.orders_eu",
        "shop.orders_us",
        "shop.orders",
        "shop.orders__dlq",
    )


def test_without_a_default_table_the_dead_letter_table_is_the_anchor() -> None:
    config = load(routed(tables={"eu": "shop.orders_eu"}))
    assert config.mappings[0].dead_letter_table == "shop.orders__dlq"  # {namespace}.{topic}__dlq
    assert config.anchor_table("orders") == "shop.orders__dlq"


def test_template_route_namespace_gives_the_dead_letter_table() -> None:
    config = load(routed(table_template="lake.orders_{value}"))
    assert config.mappings[0].dead_letter_table == "lake.orders__dlq"
    assert config.mappings[0].data_tables == ()


def test_table_is_not_allowed_with_route_and_names_default_table() -> None:
    data = routed(tables={"eu": "shop.orders_eu"})
    data["mappings"][0]["table"] = "shop.orders"
    problem = problems_of(data)["mappings[0].table"]
    assert "not allowed with route" in problem
    assert "route.default_table" in problem


def test_a_mapping_needs_a_table_or_a_route() -> None:
    data = minimal()
    del data["mappings"][0]["table"]
    assert "or give a route" in problems_of(data)["mappings[0].table"]


@pytest.mark.parametrize(
    ("route", "key", "text"),
    [
        ({"field": ""}, "mappings[0].route.field", "required"),
        ({"field": "a..b", "tables": {"x": "shop.x"}}, "mappings[0].route.field", "dotted path"),
        ({"field": "region"}, "mappings[0].route.tables", "table_template"),
        ({"field": "region", "table_template": "shop.orders"}, "mappings[0].route.table_template", "{value}"),
        (
            {"field": "region", "table_template": "{value}.orders"},
            "mappings[0].route.table_template",
            "table name",
        ),
        (
            {"field": "region", "table_template": "orders_{value}"},
            "mappings[0].route.table_template",
            "namespace",
        ),
        ({"field": "region", "tables": {"eu": "orders_eu"}}, "mappings[0].route.tables.eu", "identifier"),
        (
            {"field": "region", "tables": {"eu": "shop.x"}, "default_table": "x"},
            "mappings[0].route.default_table",
            "identifier",
        ),
    ],
)
def test_wrong_route_config_names_the_key(route: dict[str, Any], key: str, text: str) -> None:
    data = minimal()
    data["mappings"] = [{"topic": "orders", "route": route}]
    problems = problems_of(data)
    assert key in problems, problems
    assert text in problems[key]


def test_a_table_is_written_by_one_mapping_across_routes() -> None:
    data = routed(tables={"eu": "shop.orders_eu"}, default_table="shop.orders")
    data["mappings"].append({"topic": "payments", "table": "shop.orders_eu"})
    assert "already written by mappings[0].route.tables.eu" in problems_of(data)["mappings[1].table"]


def test_dead_letter_table_may_not_be_a_routed_table() -> None:
    data = routed(tables={"eu": "shop.orders_eu"}, default_table="shop.orders")
    data["mappings"][0]["dead_letter_table"] = "shop.orders_eu"
    assert "rows to" in problems_of(data)["mappings[0].dead_letter_table"]


def test_two_values_may_share_a_table() -> None:
    config = load(routed(tables={"eu": "shop.orders_eu", "EU": "shop.orders_eu"}))
    assert config.mappings[0].data_tables == ("shop.orders_eu",)


def test_several_mappings_of_a_topic_share_lfs_and_the_corrupt_segment_policy() -> None:
    data = minimal()
    data["s3"]["region"] = "us-east-1"
    data["mappings"].append(
        {
            "topic": "orders",
            "table": "shop.orders_raw",
            "lfs": {"mode": "reference"},
            "corrupt_segment_policy": "quarantine",
        }
    )
    problems = problems_of(data)
    assert "same lfs settings" in problems["mappings[1].lfs"]
    assert "same policy" in problems["mappings[1].corrupt_segment_policy"]


def test_first_mapping_is_the_anchor_of_a_topic_with_several() -> None:
    data = minimal()
    data["mappings"] = [
        {"topic": "orders", "table": "shop.orders_raw"},
        {"topic": "orders", "route": {"field": "region", "tables": {"eu": "shop.orders_eu"}}},
    ]
    config = load(data)
    assert config.anchor_table("orders") == "shop.orders_raw"
    assert config.mapping_for("orders") is config.mappings[0]


def test_glue_has_one_namespace_level_for_routed_tables() -> None:
    data = routed(tables={"eu": "a.b.orders_eu"}, table_template="a.b.o_{value}")
    data["iceberg"] = {"catalog": {"type": "glue"}, "warehouse": "s3://w/h"}
    problems = problems_of(data)
    assert "Glue" in problems["mappings[0].route.tables.eu"]
    assert "Glue" in problems["mappings[0].route.table_template"]


def test_template_values_follow_the_identifier_rule() -> None:
    assert template_identifier("lake.orders_{value}", "eu_west") == "lake.orders_eu_west"
    for bad in ("EU", "eu-west", "", "a.b", "x" * 101, "é"):
        assert template_identifier("lake.orders_{value}", bad) is None
    assert matches_template("lake.orders_{value}", "lake.orders_eu")
    assert not matches_template("lake.orders_{value}", "lake.orders__dlq_X")
    assert not matches_template("lake.orders_{value}", "lake.payments_eu")


def test_two_templates_that_could_name_the_same_table_are_refused() -> None:
    data = routed(table_template="lake.orders_{value}")
    data["mappings"].append(
        {"topic": "payments", "route": {"field": "kind", "table_template": "lake.{value}"}}
    )
    assert "can name the same tables" in problems_of(data)["mappings[1].route.table_template"]
    data["mappings"][1]["route"]["table_template"] = "lake.payments_{value}"
    assert load(data).mappings[1].route is not None


def test_the_small_file_trigger_checks_every_data_table_of_a_routed_topic() -> None:
    data = routed(
        tables={"eu": "shop.orders_eu"}, table_template="shop.orders_{value}", default_table="shop.orders"
    )
    data["maintenance"] = {"trigger_small_files": 10}
    trigger = SmallFileTrigger(load(data))

    def state(table: str, files: int) -> TableState:
        return TableState(table, "orders", 1, TableMarker(offsets={0: 1}), data_files=files, files_baseline=0)

    assert trigger.due("orders", {"shop.orders_eu": state("shop.orders_eu", 11)})
    assert trigger.due("orders", {"shop.orders_apac": state("shop.orders_apac", 11)})  # a template's
    assert not trigger.due("orders", {"shop.orders": state("shop.orders", 10)})
    assert not trigger.due("orders", {"shop.orders__dlq": state("shop.orders__dlq", 50)})  # dead letters


def test_the_routing_examples_of_the_configuration_docs_load() -> None:
    """docs/configuration.md, "One topic into several tables": each YAML example is a valid config."""
    import re
    from pathlib import Path

    import yaml

    text = Path(__file__).parent.parent.joinpath("docs", "configuration.md").read_text()
    section = text.split("## One topic into several tables", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(examples) == 2
    for example in examples:
        data = minimal()
        data["mappings"] = yaml.safe_load(example)["mappings"]
        config = load(data)
        assert config.mappings
    assert load({**minimal(), "mappings": yaml.safe_load(examples[0])["mappings"]}).anchor_table(
        "orders"
    ) == ("shop.orders")
