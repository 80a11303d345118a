"""The reconciler: finds topics the event path left behind and sets each right (scheduled, or every
poll of the one-machine loop).

S3 → SQS delivery is at-least-once, not guaranteed; a Lambda can die between steps. Per discovered
topic:

1. a lease held by a KafScale Go processor: left alone (reported: two processors on one topic);
2. a lease held by a run whose steps are known to have ended (`RunTracker`): the lease is released,
   fenced by its token, so the topic doesn't wait for the TTL. A run that still executes, or one the
   tracker can't see, keeps its lease (it expires by itself if nobody renews it);
3. no lease (or a released one) and complete segments after the committed offsets: the topic is
   signalled (a topic signal on the work queue, or the local loop's launch). The launcher plans from
   the committed offsets, so a signal for an already-handled topic costs one look, never a duplicate.

Runs whose steps died unrecorded are then re-planned under their next attempt by the launcher
(see `Launcher.launch`). The check costs one `LIST` (`StartAfter` the committed segment) per
partition of each mapped topic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from kafscale_iceberg.domain.leases import LeaseGrant, LeaseHolder
from kafscale_iceberg.exceptions import SegmentFormatError, SegmentKeyError
from kafscale_iceberg.ports import CheckpointStore, RunTracker, SegmentLister, TopicSignaller
from kafscale_iceberg.services.discovery import Discovered, TopicDiscovery
from kafscale_iceberg.services.pending import pending_segments

logger = logging.getLogger(__name__)


class Action(StrEnum):
    """What the reconciler did for a topic."""

    SIGNALLED = "signalled"
    BUSY = "busy"
    IDLE = "idle"
    GO_PROCESSOR = "go_processor"


@dataclass(frozen=True)
class TopicCheck:
    """The reconciler's finding for one topic."""

    topic: str
    action: Action
    detail: str = ""
    pending_segments: int = 0
    released_lease_of: str | None = None
    """The run id whose dead lease was released, if any."""


@dataclass(frozen=True)
class ReconcileReport:
    """One reconciler pass."""

    source: str
    checks: tuple[TopicCheck, ...]

    @property
    def signalled(self) -> tuple[str, ...]:
        """Topics signalled in this pass."""
        return tuple(c.topic for c in self.checks if c.action is Action.SIGNALLED)


class Reconciler:
    """One pass over the discovered topics (see the module docstring)."""

    def __init__(
        self,
        checkpoints: CheckpointStore,
        segments: SegmentLister,
        discovery: TopicDiscovery,
        signaller: TopicSignaller,
        *,
        runs: RunTracker | None = None,
        lease_ttl_seconds: int = 30,
    ) -> None:
        self._checkpoints = checkpoints
        self._segments = segments
        self._discovery = discovery
        self._signaller = signaller
        self._runs = runs
        self._lease_ttl_seconds = lease_ttl_seconds

    def reconcile(self) -> ReconcileReport:
        """Check every discovered topic once; signal those with pending segments and no live run.

        Raises `DiscoveryError` (transient) when `discovery.mode: etcd` can't read the snapshot.
        """
        discovered = self._discovery.discover()
        checks = tuple(self._check(topic, discovered) for topic in discovered.topics)
        for check in checks:
            if check.action is not Action.IDLE:
                logger.info(
                    "reconciler: %s",
                    check.action.value,
                    extra={"topic": check.topic, "detail": check.detail},
                )
        return ReconcileReport(source=discovered.source, checks=checks)

    def _check(self, topic: str, discovered: Discovered) -> TopicCheck:
        released: str | None = None
        holder = self._checkpoints.read_lease_holder(topic)
        if holder is not None:
            if holder.is_go_processor:
                return TopicCheck(
                    topic,
                    Action.GO_PROCESSOR,
                    detail=f"{holder.describe()}: stop the Go processor for this topic before this one runs",
                )
            if not self._release_if_dead(holder):
                return TopicCheck(topic, Action.BUSY, detail=holder.describe())
            released = holder.run_id
        pending = self.pending_segments(topic, discovered.partitions(topic))
        if not pending:
            return TopicCheck(topic, Action.IDLE, released_lease_of=released)
        reason = f"reconciler: {pending} complete segments after the committed offsets and no run in flight"
        self._signaller.signal(topic, reason)
        return TopicCheck(
            topic, Action.SIGNALLED, detail=reason, pending_segments=pending, released_lease_of=released
        )

    def pending_segments(self, topic: str, allowed: frozenset[int] | None = None) -> int:
        """Complete segments after the committed offsets, over the topic's (allowed) partitions."""
        committed = self._checkpoints.load_committed_offsets(topic)
        count = 0
        for partition in self._segments.list_partitions(topic):
            if allowed is not None and partition not in allowed:
                continue
            try:
                chosen, _ = pending_segments(self._segments, topic, partition, committed.offset(partition))
            except (SegmentKeyError, SegmentFormatError) as exc:
                # This partition waits (the launcher and `status` report it); the others are counted.
                logger.warning("reconciler: partition %d waits: %s", partition, exc, extra={"topic": topic})
                continue
            count += len(chosen)
        return count

    def _release_if_dead(self, holder: LeaseHolder) -> bool:
        """Release `holder`'s lease when its run's steps are known to have ended; True if released."""
        if self._runs is None or holder.run_id is None:
            return False
        if self._runs.is_running(holder.run_id) is not False:
            return False
        grant = LeaseGrant(
            topic=holder.topic,
            owner_id=holder.owner_id,
            run_id=holder.run_id,
            token=holder.token,
            lease_id=holder.lease_id,
            ttl_seconds=self._lease_ttl_seconds,
            claimed_at_ms=holder.claimed_at_ms or 0,
        )
        released = self._checkpoints.release_lease(grant)
        if released:
            logger.warning(
                "released the lease of a run whose steps ended without releasing it",
                extra={"topic": holder.topic, "run_id": holder.run_id, "owner": holder.owner_id},
            )
        return released
