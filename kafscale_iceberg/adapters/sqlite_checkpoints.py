"""`SqliteCheckpointStore`: leases and offsets in one SQLite file, for one machine without etcd.

Same semantics as the etcd store: per-topic leases with a TTL (expiry judged by the wall clock of the
machine, which every process on it shares), never-repeating fencing tokens, offsets and watermarks
under the etcd key strings with the Go processor's JSON values. Every operation is one
`BEGIN IMMEDIATE` transaction on its own connection, so several processes (and threads) on the same
machine can share the file; SQLite's write lock serializes them. Not for network file systems.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path

from kafscale_iceberg.adapters.checkpoint_stores import CheckpointStoreBase, wall_clock_ms
from kafscale_iceberg.domain.checkpoint_keys import prefix_range_end
from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant, LeaseHolder
from kafscale_iceberg.domain.offsets import (
    CommittedOffsets,
    OffsetState,
    OffsetUpdate,
    decode_partition_states,
    encode_offset_state,
    plan_offset_write,
)
from kafscale_iceberg.exceptions import (
    CheckpointRequestError,
    CheckpointUnavailableError,
    LeaseLostError,
)

logger = logging.getLogger(__name__)

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoint_kv (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    key           TEXT PRIMARY KEY,
    topic         TEXT NOT NULL,
    token         INTEGER NOT NULL,
    owner_id      TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    ttl_seconds   INTEGER NOT NULL,
    claimed_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
-- AUTOINCREMENT never hands out a number twice, even after rows are deleted: the fencing tokens.
CREATE TABLE IF NOT EXISTS lease_tokens (
    token INTEGER PRIMARY KEY AUTOINCREMENT,
    key   TEXT NOT NULL
);
"""
_LEASE_COLUMNS = "key, topic, token, owner_id, run_id, ttl_seconds, claimed_at_ms, expires_at_ms"
_TRANSIENT_SQLITE_ERRORS = {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_RECOVERY"}

_LeaseRow = tuple[str, str, int, str, str, int, int, int]


class SqliteCheckpointStore(CheckpointStoreBase):
    """`CheckpointStore` over a SQLite file (created on first use). See the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        key_prefix: str = "processors",
        lease_ttl_seconds: int = 30,
        busy_timeout_seconds: float = 10.0,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        super().__init__(key_prefix=key_prefix, lease_ttl_seconds=lease_ttl_seconds, now_ms=now_ms)
        self._path = Path(path)
        self._busy_timeout_seconds = busy_timeout_seconds
        self._schema_ready = False

    @property
    def path(self) -> Path:
        """The SQLite file."""
        return self._path

    # -- leases ------------------------------------------------------------------------------------

    def claim_lease(self, topic: str, *, owner_id: str, run_id: str) -> LeaseGrant | LeaseBusy:
        """Create the topic's lease if nobody holds it (or its TTL ran out). See `CheckpointStore`."""
        key = self._keys.lease(topic)
        with self._transaction(f"claim the lease of topic {topic!r}") as db:
            now = self._now_ms()
            row = self._lease_row(db, key)
            if row is not None and row[7] > now:
                return LeaseBusy(topic=topic, holder=_holder(row))
            if row is not None:
                db.execute("DELETE FROM leases WHERE key = ?", (key,))
            cursor = db.execute("INSERT INTO lease_tokens (key) VALUES (?)", (key,))
            token = cursor.lastrowid
            if token is None:  # pragma: no cover - sqlite3 always sets it after an INSERT
                raise CheckpointRequestError("claim a lease", (str(self._path),), "no fencing token issued")
            db.execute("DELETE FROM lease_tokens WHERE token = ?", (token,))
            expires_at = now + self._ttl_seconds * 1000
            db.execute(
                f"INSERT INTO leases ({_LEASE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, topic, token, owner_id, run_id, self._ttl_seconds, now, expires_at),
            )
        grant = LeaseGrant(
            topic=topic,
            owner_id=owner_id,
            run_id=run_id,
            token=token,
            lease_id=token,
            ttl_seconds=self._ttl_seconds,
            claimed_at_ms=now,
        )
        logger.info(
            "lease claimed",
            extra={"topic": topic, "run_id": run_id, "token": token, "ttl_s": self._ttl_seconds},
        )
        return grant

    def renew_lease(self, grant: LeaseGrant) -> None:
        """Push the lease's expiry to now + TTL. Idempotent; `LeaseLostError` if it is no longer ours."""
        with self._transaction(f"renew the lease of topic {grant.topic!r}") as db:
            now = self._now_ms()
            self._check_lease(db, grant, now)
            db.execute(
                "UPDATE leases SET expires_at_ms = ? WHERE key = ? AND token = ?",
                (now + grant.ttl_seconds * 1000, self._keys.lease(grant.topic), grant.token),
            )

    def release_lease(self, grant: LeaseGrant) -> bool:
        """Delete the lease only if it is still this grant's. Idempotent; True if this call released it."""
        key = self._keys.lease(grant.topic)
        with self._transaction(f"release the lease of topic {grant.topic!r}") as db:
            row = self._lease_row(db, key)
            if row is None or row[2] != grant.token:
                return False
            db.execute("DELETE FROM leases WHERE key = ? AND token = ?", (key, grant.token))
            released = row[7] > self._now_ms()
        logger.info(
            "lease released", extra={"topic": grant.topic, "run_id": grant.run_id, "token": grant.token}
        )
        return released

    def read_lease_holder(self, topic: str) -> LeaseHolder | None:
        """Who holds the topic's lease now, or None."""
        key = self._keys.lease(topic)
        with self._transaction(f"read the lease of topic {topic!r}", write=False) as db:
            row = self._lease_row(db, key)
        if row is None or row[7] <= self._now_ms():
            return None
        return _holder(row)

    # -- offsets -----------------------------------------------------------------------------------

    def load_committed_offsets(self, topic: str) -> CommittedOffsets:
        """The topic's committed offsets; partitions without a stored value read as -1."""
        prefix = self._keys.offsets_prefix(topic)
        with self._transaction(f"load the committed offsets of topic {topic!r}", write=False) as db:
            items = self._read_prefix(db, prefix)
        return CommittedOffsets(topic=topic, states=decode_partition_states(items, prefix=prefix))

    def read_cluster_metadata(self) -> ClusterMetadata | None:
        """None: only etcd holds a KafScale cluster's metadata snapshot."""
        return None

    # -- internals ---------------------------------------------------------------------------------

    def _write_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate], *, allow_rewind: bool, verb: str
    ) -> dict[int, OffsetState]:
        topic = grant.topic
        offsets_prefix = self._keys.offsets_prefix(topic)
        watermarks_prefix = self._keys.partition_watermarks_prefix(topic)
        with self._transaction(f"{verb} the offsets of topic {topic!r}") as db:
            now = self._now_ms()
            self._check_lease(db, grant, now)
            committed = decode_partition_states(self._read_prefix(db, offsets_prefix), prefix=offsets_prefix)
            watermarks = decode_partition_states(
                self._read_prefix(db, watermarks_prefix), prefix=watermarks_prefix
            )
            write = plan_offset_write(
                topic,
                committed=committed,
                partition_watermarks=watermarks,
                updates=updates,
                now_ms=now,
                allow_rewind=allow_rewind,
            )
            rows: list[tuple[str, bytes]] = []
            for partition, state in write.states.items():
                value = encode_offset_state(state)
                rows.append((self._keys.offsets(topic, partition), value))
                rows.append((self._keys.partition_watermark(topic, partition), value))
            rows.append((self._keys.topic_watermark(topic), encode_offset_state(write.topic_watermark)))
            db.executemany(
                "INSERT INTO checkpoint_kv (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                rows,
            )
        return self._written(grant, verb, write.states)

    def _check_lease(self, db: sqlite3.Connection, grant: LeaseGrant, now: int) -> None:
        row = self._lease_row(db, self._keys.lease(grant.topic))
        if row is None:
            reason = "the lease is gone (released, or expired and taken over and released since)"
        elif row[2] != grant.token:
            holder = _holder(row)
            alive = row[7] > now
            reason = f"the topic is now leased by {holder.describe()}" + ("" if alive else " (expired)")
        elif row[7] <= now:
            reason = f"the lease expired at {row[7]} ms (TTL {row[5]} s, not renewed in time)"
        else:
            return
        raise LeaseLostError(grant.topic, grant.token, grant.run_id, reason)

    @staticmethod
    def _lease_row(db: sqlite3.Connection, key: str) -> _LeaseRow | None:
        row: _LeaseRow | None = db.execute(
            f"SELECT {_LEASE_COLUMNS} FROM leases WHERE key = ?", (key,)
        ).fetchone()
        return row

    @staticmethod
    def _read_prefix(db: sqlite3.Connection, prefix: str) -> list[tuple[str, bytes]]:
        rows: list[tuple[str, bytes]] = db.execute(
            "SELECT key, value FROM checkpoint_kv WHERE key >= ? AND key < ? ORDER BY key",
            (prefix, prefix_range_end(prefix)),
        ).fetchall()
        return rows

    @contextmanager
    def _transaction(self, operation: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One connection, one transaction: committed on success, rolled back on any exception.

        Writes take the write lock up front (BEGIN IMMEDIATE) so read-check-write cannot interleave
        with another process; sqlite3 errors become our transient / terminal errors.
        """
        try:
            with closing(self._connect()) as db:
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            name = getattr(exc, "sqlite_errorname", "")
            if name in _TRANSIENT_SQLITE_ERRORS:
                raise CheckpointUnavailableError(
                    operation, (str(self._path),), f"{self._path}: {name}: {exc}"
                ) from exc
            raise CheckpointRequestError(
                operation, (str(self._path),), f"{name or type(exc).__name__}: {exc}"
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        if not self._schema_ready:
            self._path.parent.mkdir(parents=True, exist_ok=True)  # the default path is a relative folder
        db = sqlite3.connect(self._path, timeout=self._busy_timeout_seconds, isolation_level=None)
        if not self._schema_ready:
            try:
                self._create_schema(db)
            except BaseException:
                db.close()
                raise
            self._schema_ready = True
        return db

    def _create_schema(self, db: sqlite3.Connection) -> None:
        self._use_wal(db)
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"the file has checkpoint schema version {version}; this release knows {_SCHEMA_VERSION}"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _use_wal(self, db: sqlite3.Connection) -> None:
        """Put the file in WAL mode (readers run beside the one writer; the setting is stored in the file).

        While other connections are creating or switching the same fresh file, SQLite answers this
        switch `database is locked` at once, without waiting its busy timeout (measured: about 1
        claim in 100 when six open a new file together): so it is retried here for up to that timeout.
        """
        deadline = time.monotonic() + self._busy_timeout_seconds
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_BUSY")
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(0.005)


def _holder(row: _LeaseRow) -> LeaseHolder:
    _key, topic, token, owner_id, run_id, _ttl, claimed_at_ms, expires_at_ms = row
    return LeaseHolder(
        topic=topic,
        owner_id=owner_id,
        run_id=run_id,
        token=token,
        lease_id=token,
        claimed_at_ms=claimed_at_ms,
        expires_at_ms=expires_at_ms,
    )
