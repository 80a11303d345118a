"""What the two checkpoint stores (`EtcdCheckpointStore`, `SqliteCheckpointStore`) share: the keys, the
lease TTL and the clock, and offset writes that are one fenced write each backend implements
(`_write_offsets`), called forwards only (a commit) or in any direction (a reset)."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

from kafscale_iceberg.domain.checkpoint_keys import CheckpointKeys
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetState, OffsetUpdate

logger = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    """Now, in Unix milliseconds (the stores' default clock)."""
    return time.time_ns() // 1_000_000


class CheckpointStoreBase(ABC):
    """A `CheckpointStore`'s keys (under `key_prefix`), lease TTL and clock, and its `commit_offsets`
    and `reset_offsets` over the backend's one fenced write."""

    def __init__(self, *, key_prefix: str, lease_ttl_seconds: int, now_ms: Callable[[], int]) -> None:
        if lease_ttl_seconds < 1:
            raise ValueError(f"lease_ttl_seconds must be >= 1, got {lease_ttl_seconds}")
        self._keys = CheckpointKeys(key_prefix)
        self._ttl_seconds = lease_ttl_seconds
        self._now_ms = now_ms

    def commit_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]
    ) -> dict[int, OffsetState]:
        """Advance offsets + watermarks in one transaction fenced by the lease. See `CheckpointStore`."""
        return self._write_offsets(grant, updates, allow_rewind=False, verb="commit")

    def reset_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> dict[int, OffsetState]:
        """Set offsets to any value (backwards included), fenced by the lease. See `CheckpointStore`."""
        return self._write_offsets(grant, updates, allow_rewind=True, verb="reset")

    @abstractmethod
    def _write_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate], *, allow_rewind: bool, verb: str
    ) -> dict[int, OffsetState]:
        """Write `updates` (offsets and watermarks) while `grant` holds the topic; `allow_rewind`: a
        partition may move backwards (else `ConcurrentOffsetUpdateError`); `verb` names the write."""

    @staticmethod
    def _written(grant: LeaseGrant, verb: str, states: Mapping[int, OffsetState]) -> dict[int, OffsetState]:
        """`states`, once written: logged (the topic, run, fencing token and offsets) and returned."""
        logger.info(
            "offsets committed" if verb == "commit" else "offsets reset",
            extra={
                "topic": grant.topic,
                "run_id": grant.run_id,
                "token": grant.token,
                "offsets": {p: s.offset for p, s in states.items()},
            },
        )
        return dict(states)
