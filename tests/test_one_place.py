"""What the codebase says lives in one place does: every error class in the `exceptions` package
(transience said one way, by subclassing `TransientError`), every port in `ports.py`."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import functions
import kafscale_iceberg
from kafscale_iceberg import exceptions
from kafscale_iceberg.exceptions import KafscaleIcebergError, TransientError


def _error_classes() -> set[type[KafscaleIcebergError]]:
    """Every subclass of `KafscaleIcebergError` defined anywhere in the package or the handlers."""
    for package in (kafscale_iceberg, functions):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)
    found: set[type[KafscaleIcebergError]] = set()
    pending: list[type[KafscaleIcebergError]] = [KafscaleIcebergError]
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.add(cls)
            pending.extend(cls.__subclasses__())
    return {cls for cls in found if cls.__module__.startswith(("kafscale_iceberg", "functions"))}


def test_every_error_class_is_defined_in_the_exceptions_package_and_exported_by_it() -> None:
    classes = _error_classes()
    assert len(classes) > 50  # the walk found the hierarchy, not just its root
    elsewhere = sorted(
        f"{cls.__module__}.{cls.__name__}"
        for cls in classes
        if not cls.__module__.startswith("kafscale_iceberg.exceptions.")
        or getattr(exceptions, cls.__name__, None) is not cls
    )
    assert elsewhere == []


def test_an_error_is_transient_exactly_when_it_subclasses_transient_error() -> None:
    for cls in _error_classes():
        assert cls.transient is issubclass(cls, TransientError), cls
        if cls not in (KafscaleIcebergError, TransientError):
            assert "transient" not in vars(cls), f"{cls.__name__} sets `transient`: subclass TransientError"


NOT_PORTS = {
    "kafscale_iceberg/metrics/emf.py": {"PowertoolsMetrics"},  # the shape of Powertools' `Metrics` object
    "kafscale_iceberg/dataplane/columns.py": {"ExtractedColumns"},  # a value's shape, not a dependency
    "kafscale_iceberg/local/pipeline.py": {"PipelineObserver"},  # the loop's callbacks, over its `RunReport`
    "kafscale_iceberg/dataplane/formats/decoded.py": {"CompiledRecordSchema"},  # what a decoder groups by
    "kafscale_iceberg/dataplane/formats/choice.py": {"DecoderFactory"},  # a format module's `decoder`
    "kafscale_iceberg/config/upsert.py": {"KeyColumnCandidate"},  # what the upsert rules read of a column
}
"""Protocols that are not ports (nothing outside their module implements them as an adapter)."""


def test_every_port_is_defined_in_the_ports_module() -> None:
    root = Path(__file__).resolve().parent.parent
    outside: dict[str, set[str]] = {}
    for folder in ("kafscale_iceberg", "functions", "spark_app"):
        for path in (root / folder).rglob("*.py"):
            name = str(path.relative_to(root))
            protocols = {
                node.name
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "Protocol" for b in node.bases)
            }
            if protocols and name != "kafscale_iceberg/ports.py":
                outside[name] = protocols
    assert outside == NOT_PORTS
