"""A topic's retry backoff after failed runs, honoured by every path that can start a run.

The abort step records `{runs.location}/{topic}/backoff.json`: how many runs of the topic failed in a
row from the same committed offsets, and the time before which no new run may start. The launcher
reads it before claiming the lease, so a reconciler pass, a notification, a topic signal or the
local loop all wait alike (they all plan through the launcher). The streak is keyed on the committed
offsets the failed run started from, not on its range: segments keep arriving while a topic fails,
so each re-plan covers a new range, and a backoff keyed on the range (the run id's attempt) would be
skipped every time. A commit moves the offsets, which ends the streak without touching the document.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from kafscale_iceberg.adapters.documents import DocumentMissingError, DocumentStore
from kafscale_iceberg.config import RunsConfig
from kafscale_iceberg.domain.tickets import join_uri

BACKOFF_NAME = "backoff.json"


class TopicBackoff(BaseModel):
    """`backoff.json`: the topic's current failure streak (written by the abort step)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    failures: int
    """Consecutive failed runs starting from `offsets`."""
    not_before_ms: int
    """No run of the topic starts before this time (Unix milliseconds)."""
    offsets: dict[int, int]
    """The committed offsets (partition -> offset) the failed runs started from."""
    run_id: str
    reason: str

    def applies_to(self, committed: Mapping[int, int]) -> bool:
        """True while nothing was committed since the failure (the streak goes on)."""
        return all(committed.get(partition, -1) == offset for partition, offset in self.offsets.items())


def backoff_uri(runs_location: str, topic: str) -> str:
    """Where `topic`'s backoff document lives."""
    return join_uri(runs_location, topic, BACKOFF_NAME)


class BackoffRecords:
    """Reads and writes topics' backoff documents."""

    def __init__(self, documents: DocumentStore, runs: RunsConfig) -> None:
        self._documents = documents
        self._runs = runs

    def read(self, topic: str) -> TopicBackoff | None:
        """The topic's backoff document, None when it has none. Raises `DocumentStoreError` (transient)."""
        try:
            text = self._documents.read_text(backoff_uri(self._runs.location, topic))
        except DocumentMissingError:
            return None
        return TopicBackoff.model_validate_json(text)

    def wait_seconds(
        self, topic: str, committed: Mapping[int, int], now_s: float
    ) -> tuple[float, TopicBackoff | None]:
        """Seconds before a run of `topic` may start from `committed` (0 when it may now), and why."""
        backoff = self.read(topic)
        if backoff is None or not backoff.applies_to(committed):
            return 0.0, None
        return max(0.0, backoff.not_before_ms / 1000.0 - now_s), backoff

    def record_failure(
        self,
        topic: str,
        *,
        starts: Mapping[int, int],
        run_id: str,
        reason: str,
        attempt: int,
        now_s: float,
    ) -> TopicBackoff:
        """Count one more failed run starting from `starts` and set the time the next may start. Idempotent
        per run id (the same run recorded twice counts once)."""
        previous = self.read(topic)
        failures = attempt + 1
        if previous is not None and previous.applies_to(starts):
            failures = max(failures, previous.failures + (previous.run_id != run_id))
        backoff = TopicBackoff(
            failures=failures,
            not_before_ms=int((now_s + self._runs.retry_delay_seconds(failures)) * 1000),
            offsets=dict(starts),
            run_id=run_id,
            reason=reason[:500],
        )
        self._documents.write_text(backoff_uri(self._runs.location, topic), backoff.model_dump_json())
        return backoff
