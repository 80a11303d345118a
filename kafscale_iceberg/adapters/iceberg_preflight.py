"""The catalog's side of the checks before a command starts (`local/preflight.py`): which mapped
tables are missing, and their namespaces created when they will be created."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import suppress

from pyiceberg.exceptions import NamespaceAlreadyExistsError

from kafscale_iceberg.adapters.iceberg_catalog import (
    CatalogSettings,
    load_iceberg_catalog,
    translate_catalog_error,
)


def missing_tables(
    settings: CatalogSettings, tables: Sequence[str], *, create_namespaces_of: Iterable[str] = ()
) -> list[str]:
    """The names in `tables` the catalog does not hold; first creates (idempotently) the namespace
    of each missing table in `create_namespaces_of`. Raises what `load_iceberg_catalog` raises, and
    the translated catalog error when a lookup fails."""
    catalog = load_iceberg_catalog(settings)
    try:
        missing = [name for name in tables if not catalog.table_exists(name)]
        for name in set(create_namespaces_of) & set(missing):
            namespace = name.rsplit(".", 1)[0]
            if "." in name and not catalog.namespace_exists(namespace):
                with suppress(NamespaceAlreadyExistsError):  # another process created it meanwhile
                    catalog.create_namespace(namespace)
    except Exception as exc:
        raise translate_catalog_error(settings, "look up the mapped tables", exc) from exc
    return missing
