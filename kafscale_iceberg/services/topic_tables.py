"""Every table a topic is written to: the tables its mappings name, and those a route's template made.

A template's tables are not in the config: they are found by listing the template's namespace in the
catalog and keeping the tables the template can name that record the topic (`kafscale.offsets.<topic>`,
the marker every commit of a run writes). Used by everything that reads or changes "the topic's
tables": `status`, offset resets (`replay --reset-offsets`), maintenance and the small-file trigger.
"""

from __future__ import annotations

from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.domain.routing import matches_template, template_namespace
from kafscale_iceberg.ports import TableCommitter, TableLister, TableStatusReader
from kafscale_iceberg.services.commits.verified_commit import read_state_if_exists


def topic_tables(
    config: KafscaleConfig,
    topic: str,
    lister: TableLister | None = None,
    tables: TableCommitter | TableStatusReader | None = None,
) -> tuple[str, ...]:
    """The config's tables of `topic` (`KafscaleConfig.topic_tables`), then the template tables found
    in the catalog (sorted), when `lister` and `tables` are given."""
    named = config.topic_tables(topic)
    if lister is None or tables is None:
        return named
    found: set[str] = set()
    for mapping in config.mappings_for(topic):
        template = mapping.route.table_template if mapping.route is not None else ""
        if not template:
            continue
        for identifier in lister.list_tables(template_namespace(template)):
            if identifier in config.named_tables or not matches_template(template, identifier):
                continue
            state = read_state_if_exists(tables, identifier, topic)  # type: ignore[arg-type]
            if state is not None and state.marker.offsets is not None:
                found.add(identifier)
    return (*named, *sorted(found))
