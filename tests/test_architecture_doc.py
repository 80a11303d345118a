"""docs/architecture.md is the map: every file and folder it names exists, and its metrics table names
exactly the metrics the code defines. A module renamed or a metric added without the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

from kafscale_iceberg.metrics.definitions import ALL_METRICS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _named_paths(text: str) -> set[str]:
    """Backticked file and folder names: `services/commits/commit.py`, `infra/`, `template.yaml`."""
    names = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        if any(mark in token for mark in ("{", ":", "*", "=")):
            continue  # templates, URIs, globs, settings
        if token.endswith("/") or re.search(r"\.(py|json|yaml|md)$", token):
            names.add(token)
    return names


def _exists(name: str, source_names: set[str], code: str) -> bool:
    if "/" in name.rstrip("/"):
        return any((base / name).exists() for base in (ROOT, ROOT / "kafscale_iceberg", ROOT / "docs"))
    if name.endswith(".json") and f'"{name}"' in code:
        return True  # a document the code writes (plan.json, outcome.json, ...)
    # A bare name stands beside the folder it lives in (`spark_app/` ... `job.py`).
    return name.rstrip("/") in source_names


def test_every_file_and_folder_the_map_names_exists() -> None:
    names = _named_paths(DOC.read_text())
    assert len(names) > 40  # the map names the code it describes
    sources = [
        path
        for folder in ("kafscale_iceberg", "functions", "spark_app", "infra", "tests", "bench")
        for path in (ROOT / folder).rglob("*")
        if "__pycache__" not in path.parts
    ]
    source_names = {path.name for path in sources} | {p.name for p in ROOT.iterdir()}
    code = "\n".join(path.read_text() for path in sources if path.suffix == ".py")
    missing = sorted(name for name in names if not _exists(name, source_names, code))
    assert missing == []


def test_the_metrics_table_names_exactly_the_defined_metrics() -> None:
    text = DOC.read_text()
    section = text.split("### Metrics", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split(" | ")[0])}
    assert documented == {metric.name for metric in ALL_METRICS}
