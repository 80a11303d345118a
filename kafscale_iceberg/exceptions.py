"""The error hierarchy: every error says what failed, on which identifiers, and what to do next.

Each error is either *transient* (retrying the same work later may succeed: a network blip, a busy
lease, a segment whose `.index` has not landed yet) or *terminal* (retrying changes nothing until a
person acts: a corrupt segment, a bad config). Callers decide retry from `error.transient`, never
from the class name. Foreign exceptions are translated once, in the adapter, with `raise ... from`.
"""

from __future__ import annotations

from collections.abc import Sequence


class KafscaleIcebergError(Exception):
    """Base of every error this package raises on purpose."""

    transient: bool = False


class TransientError(KafscaleIcebergError):
    """Retrying the same work later may succeed."""

    transient = True


class ConfigError(KafscaleIcebergError):
    """The configuration is invalid; the message names the YAML key and the allowed values."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"config key '{key}': {problem}")


class ConfigValidationError(ConfigError):
    """A config source failed to load; `problems` holds every `(key path, problem)` found, not only the first.

    `key` and `problem` are those of the first problem; the message lists them all, one per line, and
    never contains a secret's value.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str, str]], *, note: str = "") -> None:
        if not problems:
            raise ValueError("ConfigValidationError needs at least one problem")
        self.source = source
        self.problems = tuple(problems)
        super().__init__(*self.problems[0])
        count = len(self.problems)
        lines = [f"invalid configuration in {source} ({count} problem{'' if count == 1 else 's'}):"]
        lines += [f"  {key}: {problem}" if key else f"  {problem}" for key, problem in self.problems]
        if note:
            lines.append(note)
        self.args = ("\n".join(lines),)


class SegmentKeyError(KafscaleIcebergError):
    """An S3 key is not a KafScale segment or index key (or names an invalid topic)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"not a KafScale segment key: {key!r}: {problem}")


class SegmentFormatError(KafscaleIcebergError):
    """A segment or index file is corrupt or truncated.

    Names the object, the byte position where decoding failed and what was expected there. Terminal:
    the bytes will not change by retrying; repair or replace the object, or quarantine it by policy.
    """

    def __init__(self, source: str, position: int, problem: str) -> None:
        self.source = source
        self.position = position
        self.problem = problem
        super().__init__(
            f"{source}: byte {position}: {problem} "
            "(the object is corrupt or truncated: re-upload it from the broker, or set the "
            "corrupt-segment policy to 'quarantine' to record it in the dead-letter table and move on)"
        )


class TruncatedSegmentError(SegmentFormatError):
    """The data ends before a structure that must be complete (header, batch, footer, index entry)."""


class CrcMismatchError(SegmentFormatError):
    """A batch CRC-32C or the footer's body CRC-32C does not match the bytes."""


class UnsupportedCodecError(SegmentFormatError):
    """A record batch names a compression codec that Kafka does not define."""
