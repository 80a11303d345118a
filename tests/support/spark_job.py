"""The Spark job under test: one local SparkSession for the whole test session, segment folders, plans.

`spark` is session-scoped (`local[2]`, UTC, microsecond Parquet timestamps, UI off, small shuffle
partitions); import it into a test module (or list this module in `pytest_plugins`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    PartitionPlan,
    PlannedSegment,
    RunPlan,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.segments.layout import Codec

TOPIC = "orders"
NAMESPACE = "prod"
BASE_TIME_MS = 1_795_132_800_000  # 2026-11-20T00:00:00Z
ORDER_COLUMNS = (
    ColumnSpec(name="order_id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="store_id", type=ColumnType.INT),
    ColumnSpec(name="customer", type=ColumnType.STRING),
    ColumnSpec(name="total", type=ColumnType.DOUBLE),
    ColumnSpec(name="event_time", type=ColumnType.TIMESTAMP),
    ColumnSpec(name="ordered_on", type=ColumnType.DATE),
)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark for every test that needs it (starting one costs seconds)."""
    from spark_app.job import build_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Python workers inherit the environment of the JVM, fixed when it starts: the dummy credentials
    # the moto server fixture sets must be there before, or executors cannot sign S3 requests.
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(name, value)
    session = build_session(
        master="local[2]",
        app_name="kafscale-iceberg-tests",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def order_value(offset: int, partition: int) -> bytes:
    """A JSON order whose fields follow from its offset (so expected rows can be computed)."""
    return json.dumps(
        {
            "order_id": 10_000_000 + offset * 10 + partition,
            "store_id": offset % 7,
            "customer": f"customer <{offset}> & co",
            "total": offset + 0.25,
            "event_time": f"2026-11-{20 + offset % 2:02d}T{offset % 24:02d}:30:00.{offset % 1000:03d}+01:00",
            "ordered_on": f"2026-11-{20 + offset % 2:02d}",
            "items": [{"pizza": "margherita", "qty": 1 + offset % 3}],
        },
        separators=(",", ":"),
    ).encode()


def order_record(offset: int, partition: int, *, value: bytes | None = None, headers: bool = True) -> Record:
    """The record at `offset`: key, timestamp and headers also follow from the offset."""
    return Record(
        offset=offset,
        timestamp_ms=BASE_TIME_MS + offset * 1000,
        key=None if offset % 5 == 0 else f"key-{offset}".encode(),
        value=order_value(offset, partition) if value is None else value,
        headers=(("trace", f"t-{offset}".encode()), ("empty", None)) if headers and offset % 2 else (),
    )


@dataclass
class SegmentFolder:
    """A bucket-like folder of segments for one topic; remembers what it wrote for building plans."""

    root: Path
    topic: str = TOPIC
    namespace: str = NAMESPACE
    written: dict[int, list[PlannedSegment]] = field(default_factory=dict)
    records: dict[int, dict[int, Record]] = field(default_factory=dict)

    def add(
        self,
        partition: int,
        records: Sequence[Record],
        *,
        codecs: Sequence[Codec] = (Codec.NONE,),
        batch_size: int = 10,
        corrupt_at: int | None = None,
    ) -> PlannedSegment:
        """Write a segment of `records` (batches of `batch_size`, codecs cycling); optionally flip a byte."""
        batches = []
        for n, start in enumerate(range(0, len(records), batch_size)):
            chunk = records[start : start + batch_size]
            batches.append(encode_record_batch(chunk, codec=codecs[n % len(codecs)]))
        files = build_segment(batches, created_at_ms=BASE_TIME_MS)
        data = bytearray(files.kfs)
        if corrupt_at is not None:
            data[corrupt_at] ^= 0xFF
        key = format_segment_key(self.namespace, self.topic, partition, files.base_offset)
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(data))
        segment = PlannedSegment(
            key=key, base_offset=files.base_offset, last_offset=files.last_offset, size_bytes=len(data)
        )
        self.written.setdefault(partition, []).append(segment)
        self.records.setdefault(partition, {}).update({r.offset: r for r in records})
        return segment

    def add_orders(self, partition: int, first: int, count: int, **options: Any) -> PlannedSegment:
        """A segment of generated orders at offsets `first..first+count-1`."""
        return self.add(
            partition, [order_record(o, partition) for o in range(first, first + count)], **options
        )


def make_plan(
    folder: SegmentFolder,
    out: str,
    *,
    ranges: dict[int, tuple[int, int]],
    segments: dict[int, Sequence[PlannedSegment]] | None = None,
    source: SegmentSource | None = None,
    runs_uri: str | None = None,
    **conversion: Any,
) -> RunPlan:
    """A plan over `folder`'s segments: `ranges[p] = (start_exclusive, end_inclusive)`; output under `out`."""
    chosen = segments or folder.written
    run_id = make_run_id(folder.topic, [(p, s, e) for p, (s, e) in ranges.items()])
    runs = runs_uri or f"{out}/runs"
    return RunPlan(
        run_id=run_id,
        topic=folder.topic,
        created_at_ms=BASE_TIME_MS,
        source=source or SegmentSource(root=str(folder.root)),
        partitions=tuple(
            PartitionPlan(partition=p, start_exclusive=s, end_inclusive=e, segments=tuple(chosen[p]))
            for p, (s, e) in sorted(ranges.items())
        ),
        table=TableTarget(identifier="prod.orders", data_uri=f"{out}/warehouse/orders/data/{run_id}"),
        dead_letter_table=TableTarget(
            identifier="prod.orders_dead_letters", data_uri=f"{out}/warehouse/orders_dl/data/{run_id}"
        ),
        conversion=ConversionSettings(**{"columns": ORDER_COLUMNS, **conversion}),
        result_uri=f"{runs}/{folder.topic}/{run_id}/result.json",
    )


def write_plan(plan: RunPlan, store: DocumentStore | None = None) -> str:
    """Write `plan` beside its result URI; returns the plan's URI."""
    uri = plan.result_uri.rsplit("/", 1)[0] + "/plan.json"
    (store or DocumentStore()).write_text(uri, plan.model_dump_json())
    return uri
