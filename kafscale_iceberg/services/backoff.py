"""A topic's retry backoff after failed runs, honoured by every path that can start a run.

The abort step records `{runs.location}/{topic}/backoff.json`: how many runs of the topic failed in a
row from the same committed offsets, and the time before which no new run may start. The launcher
reads it before claiming the lease, so a reconciler pass, a notification, a topic signal or the
local loop all wait alike (they all plan through the launcher). The streak is keyed on the committed
offsets the failed run started from, not on its range: segments keep arriving while a topic fails,
so each re-plan covers a new range, and a backoff keyed on the range (the run id's attempt) would be
skipped every time. A commit moves the offsets, which ends the streak without touching the document.
A run Lambda killed in the Lambda runner (timeout, out of memory) sets `lambda_kill_reason`: the
streak's next runs go to EMR Serverless (`domain/runner_choice.py`), until the commit that ends it.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from kafscale_iceberg.config import RunsConfig
from kafscale_iceberg.domain.tickets import join_uri
from kafscale_iceberg.exceptions import DocumentMissingError
from kafscale_iceberg.ports import RunDocuments

BACKOFF_NAME = "backoff.json"


class HeldPartition(BaseModel):
    """A partition whose runs failed on a segment of its own (`corrupt_segment_policy: fail`): it
    waits while its committed offset stays `offset`, until `not_before_ms`; the others go on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    offset: int
    failures: int
    not_before_ms: int
    reason: str


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
    held: dict[int, HeldPartition] = {}
    lambda_kill_reason: str = Field(
        default="", validation_alias=AliasChoices("lambda_kill_reason", "lambda_failed")
    )
    """Why the streak's runs go to EMR Serverless ("timed out", "ran out of memory": Lambda killed a
    run of it in the Lambda runner); empty while they may run in Lambda. Documents written before
    the rename carry it as `lambda_failed`, still read."""

    def applies_to(self, committed: Mapping[int, int]) -> bool:
        """True while nothing was committed since the failure (the streak goes on)."""
        return all(committed.get(partition, -1) == offset for partition, offset in self.offsets.items())


def backoff_uri(runs_location: str, topic: str) -> str:
    """Where `topic`'s backoff document lives."""
    return join_uri(runs_location, topic, BACKOFF_NAME)


class BackoffRecords:
    """Reads and writes topics' backoff documents."""

    def __init__(self, documents: RunDocuments, runs: RunsConfig) -> None:
        self._documents = documents
        self._runs = runs

    def read(self, topic: str) -> TopicBackoff | None:
        """The topic's backoff document, None when it has none. Raises `DocumentStoreError` (transient)."""
        try:
            text = self._documents.read_text(backoff_uri(self._runs.location, topic))
        except DocumentMissingError:
            return None
        return TopicBackoff.model_validate_json(text)

    @staticmethod
    def held_partitions(
        backoff: TopicBackoff | None, committed: Mapping[int, int], now_s: float
    ) -> dict[int, str]:
        """Partitions that wait after failing on a segment of their own, each with why (`backoff`:
        the topic's document as `read` gave it)."""
        if backoff is None:
            return {}
        now_ms = now_s * 1000
        return {
            partition: f"{held.failures} run(s) failed on it, retried in "
            f"{(held.not_before_ms - now_ms) / 1000:.0f} s: {held.reason}"
            for partition, held in backoff.held.items()
            if committed.get(partition) == held.offset and held.not_before_ms > now_ms
        }

    @staticmethod
    def wait_seconds(
        backoff: TopicBackoff | None, committed: Mapping[int, int], now_s: float
    ) -> tuple[float, TopicBackoff | None]:
        """Seconds before a run may start from `committed` (0 when it may now), and why (`backoff`:
        the topic's document as `read` gave it)."""
        if backoff is None or not backoff.applies_to(committed):
            return 0.0, None
        return max(0.0, backoff.not_before_ms / 1000.0 - now_s), backoff

    @staticmethod
    def lambda_kill_reason(backoff: TopicBackoff | None, committed: Mapping[int, int]) -> str:
        """Why a run from `committed` goes to EMR Serverless whatever its size (a run of the streak
        was killed in the Lambda runner), empty when nothing was (or a commit ended the streak)."""
        if backoff is None or not backoff.applies_to(committed):
            return ""
        return backoff.lambda_kill_reason

    def record_failure(
        self,
        topic: str,
        *,
        starts: Mapping[int, int],
        run_id: str,
        reason: str,
        attempt: int,
        now_s: float,
        partition: int | None = None,
        lambda_killed: str | None = None,
    ) -> TopicBackoff:
        """Count one more failed run starting from `starts` and set the time the next may start. Idempotent
        per run id (the same run recorded twice counts once).

        `partition`: the failure is that partition's own (a corrupt segment with policy `fail`): only
        it is held back (`held`), the topic's other partitions are not delayed. `lambda_killed`: Lambda
        killed the run in the Lambda runner (what killed it): the streak's next runs go to EMR.
        """
        previous = self.read(topic)
        held = dict(previous.held) if previous is not None else {}
        failures = attempt + 1
        streak = previous is not None and previous.applies_to(starts)
        if streak and previous is not None:
            failures = max(failures, previous.failures + (previous.run_id != run_id))
        not_before_ms = int((now_s + self._runs.retry_delay_seconds(failures)) * 1000)
        if partition is not None and partition in starts:
            before = held.get(partition)
            count = 1
            if before is not None and before.offset == starts[partition]:
                count = before.failures + (previous is not None and previous.run_id != run_id)
            held[partition] = HeldPartition(
                offset=starts[partition],
                failures=count,
                not_before_ms=int((now_s + self._runs.retry_delay_seconds(count)) * 1000),
                reason=reason[:500],
            )
            failures, not_before_ms = 0, 0  # the topic itself goes on at once
        backoff = TopicBackoff(
            failures=failures,
            not_before_ms=not_before_ms,
            offsets=dict(starts),
            run_id=run_id,
            reason=reason[:500],
            held={p: h for p, h in held.items() if not (p in starts and h.offset != starts[p])},
            lambda_kill_reason=lambda_killed or (previous.lambda_kill_reason if streak and previous else ""),
        )
        self._documents.write_text(backoff_uri(self._runs.location, topic), backoff.model_dump_json())
        return backoff
