"""Routing one topic's records to several tables (`mappings[].route`): the rules shared by the config,
the launcher and the Spark job.

A route reads one field of the record's JSON value: a top-level name (`region`) or a dotted path into
objects (`order.region`, as the Kafka Connect Iceberg sink's route field allows). Its value must be a
JSON **string**; it picks a table:

1. `tables` - an exact (case-sensitive) match of the string with a key;
2. else `table_template` - `ns.{value}` with the value substituted, when the value is a valid table
   name (`ROUTE_VALUE_PATTERN`: lowercase letters, digits and `_`, 1-100 characters; Glue and most
   catalogs lowercase names, so nothing is folded silently) and the table is not another table of the
   config (`RoutePlan.reserved`);
3. else the record is not routed.

What happens to each record that no table takes (`RouteOutcome`):

- the field is missing or null (the value is JSON `null`, empty, or an object without it):
  `default_table`, or without one a dead letter `unrouted`;
- the field holds a number, boolean, object or array: a dead letter `route_invalid` - never matched
  by its text, and never sent to the default table, so a mistyped producer is seen, not hidden;
- a string no `tables` key matches and (with a template) that is not a valid table name: with a
  template a dead letter `route_invalid`; without one, `default_table` or a dead letter `unrouted`;
- the value is not JSON (or not a JSON object): a dead letter `invalid_json` (before routing).
"""

from __future__ import annotations

import re

from kafscale_iceberg.domain.table_locations import table_path

VALUE_PLACEHOLDER = "{value}"
ROUTE_VALUE_PATTERN = re.compile(r"[a-z0-9_]{1,100}")
"""What a route value must be to name a table through `table_template`."""
ROUTE_VALUE_RULE = "1-100 lowercase letters, digits or '_'"
PATH_PLACEHOLDER = "{path}"
"""In a plan's `data_uri_template`: the table's folder under the warehouse, `{namespace}.db/{table}`
(`table_locations.table_path`, where this product creates a table in a storage warehouse)."""


def route_path(field: str) -> tuple[str, ...]:
    """`order.region` -> `("order", "region")`."""
    return tuple(field.split("."))


def check_route_field(field: str) -> str | None:
    """Why `field` is not a route field (None when it is one)."""
    if not field or any(not part or part != part.strip() for part in route_path(field)):
        return f"{field!r} is not a field name or a dotted path into objects (e.g. region, order.region)"
    return None


def check_template(template: str) -> str | None:
    """Why `template` is not a table template (None when it is one): `namespace.prefix{value}suffix`,
    `{value}` exactly once and in the table name (the last part)."""
    parts = template.split(".")
    if template.count(VALUE_PLACEHOLDER) != 1:
        return f"{template!r} must contain {VALUE_PLACEHOLDER} exactly once (e.g. prod.orders_{{value}})"
    if len(parts) < 2 or VALUE_PLACEHOLDER not in parts[-1]:
        return f"{template!r} must be 'namespace.table' with {VALUE_PLACEHOLDER} in the table name"
    if any(not part or part != part.strip() or "{" in part.replace(VALUE_PLACEHOLDER, "") for part in parts):
        return f"{template!r} must be 'namespace.table' with {VALUE_PLACEHOLDER} in the table name"
    return None


def template_identifier(template: str, value: str) -> str | None:
    """The table `value` names through `template`, None when `value` is not a valid table name."""
    if not ROUTE_VALUE_PATTERN.fullmatch(value):
        return None
    return template.replace(VALUE_PLACEHOLDER, value)


def template_namespace(template: str) -> str:
    """The namespace a template's tables live in: `prod.orders_{value}` -> `prod`."""
    return template.rsplit(".", 1)[0]


def matches_template(template: str, identifier: str) -> bool:
    """Whether `identifier` is a table `template` can name (for discovering a topic's tables)."""
    prefix, suffix = template.split(VALUE_PLACEHOLDER)
    if not (identifier.startswith(prefix) and identifier.endswith(suffix)):
        return False
    value = identifier[len(prefix) : len(identifier) - len(suffix)]
    return bool(ROUTE_VALUE_PATTERN.fullmatch(value))


def templates_overlap(first: str, second: str) -> bool:
    """Whether two table templates could name the same table (conservatively: one's fixed prefix
    starts the other's and one's fixed suffix ends the other's)."""
    p1, s1 = first.split(VALUE_PLACEHOLDER)
    p2, s2 = second.split(VALUE_PLACEHOLDER)
    return (p1.startswith(p2) or p2.startswith(p1)) and (s1.endswith(s2) or s2.endswith(s1))


def data_uri_for(template: str, identifier: str) -> str:
    """A plan's `data_uri_template` filled for `identifier`."""
    return template.replace(PATH_PLACEHOLDER, table_path(identifier))
