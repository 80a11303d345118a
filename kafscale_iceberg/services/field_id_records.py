"""A topic's `field-ids.json` (`domain/field_ids.py`), read and written by the services that keep it.

- the launcher plans from it (one GET) and puts its digest in the plan (`RunPlan.field_ids_digest`);
- the commit step writes it after a commit, only when its content changed since the launcher read it
  (an append topic's columns rarely change: no PUT per run), and always after a refused commit;
- the abort step reads it to tell a stale plan from a failure;
- the one-machine launcher repairs an upsert table's recorded version from the table before it plans
  (`repair_versions`), as it repairs the offsets: a kill between a commit and this document's write,
  a stranded run finished by recovery, a reset or a compaction leave it old, and a plan locating in
  an old version is refused at its commit;
- maintenance moves an upsert table's recorded version to its compaction's, so the next run locates
  its changed keys in the compacted files instead of being refused for locating in files the
  compaction replaced (`services/maintenance.py`).

The document is a cache of the tables, never their truth: a write that lands out of order (a commit
step's and maintenance's racing between one's read and write) costs at most one refused run, whose
commit step writes the tables' current state again.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from pydantic import ValidationError

from kafscale_iceberg.domain.field_ids import TopicFieldIds, field_ids_uri
from kafscale_iceberg.exceptions import DocumentMissingError
from kafscale_iceberg.ports import RunDocuments

logger = logging.getLogger(__name__)


class FieldIdRecords:
    """The `field-ids.json` documents under `runs.location` (see the module docstring)."""

    def __init__(self, documents: RunDocuments, runs_location: str) -> None:
        self._documents = documents
        self._location = runs_location

    def read(self, topic: str) -> TopicFieldIds | None:
        """The topic's document (one GET); None when none is stored, or it is unreadable (logged: the
        next commit writes it from the tables). Raises the store's errors (`DocumentStoreError`)."""
        uri = field_ids_uri(self._location, topic)
        try:
            return TopicFieldIds.model_validate_json(self._documents.read_text(uri))
        except DocumentMissingError:
            return None
        except ValidationError as exc:
            logger.warning("unreadable field-id document ignored", extra={"uri": uri, "problem": str(exc)})
            return None

    def write(self, topic: str, document: TopicFieldIds, *, unless_digest: str | None = None) -> bool:
        """Store `document`, unless its digest is `unless_digest` (the one the run's launcher read:
        nothing changed, so no PUT). Whether it was written. Idempotent."""
        if unless_digest is not None and document.digest() == unless_digest:
            return False
        self._documents.write_text(field_ids_uri(self._location, topic), document.model_dump_json())
        return True

    def record_version(
        self, topic: str, table: str, metadata_location: str, *, follows: Collection[str]
    ) -> bool:
        """Move `table`'s recorded version to `metadata_location` (a compaction's) when the document
        records one for it (an upsert table's) among `follows`, the versions `metadata_location`
        comes after (its metadata log): a version recorded since by a run's commit is newer, and is
        kept. One GET, and one PUT when it moved. Whether it was written. Idempotent."""
        document = self.read(topic)
        recorded = None if document is None else document.table(table)
        if document is None or recorded is None or recorded.metadata_location not in follows:
            return False
        return self.write(topic, document.with_version(table, metadata_location))

    def repair_versions(self, topic: str, current: Mapping[str, str]) -> dict[str, str]:
        """Set the recorded version of each table in `current` (an upsert table's current metadata
        location, read from the catalog) that the document records otherwise; one GET, and one PUT
        when any moved. The versions moved (table -> the old one recorded). Idempotent."""
        document = self.read(topic)
        if document is None:
            return {}
        moved: dict[str, str] = {}
        for table, location in current.items():
            recorded = document.table(table)
            if recorded is not None and recorded.metadata_location != location:
                moved[table] = recorded.metadata_location or ""
                document = document.with_version(table, location)
        if moved:
            self.write(topic, document)
        return moved
