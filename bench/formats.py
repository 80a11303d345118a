"""Record formats against the JSON mapped path: the same pizza records as Avro in Confluent wire format.

Run with `python -m bench.spark --format avro` (or `make bench-spark BENCH_SPARK_ARGS="--format
avro"`). The workload is `bench.spark`'s pizza orders (7 mapped columns); the Avro side re-encodes
the very same events with fastavro under one schema id (`event_time` as `local-timestamp-micros`,
`ordered_on` as `date`, the other columns as their types, the `items` array as records) into segments
of the same shape, and maps the same 7 columns (projection by name). The schemas come from an
in-memory `RecordSchemaRegistry` (the registry is asked once per schema id per task, so an HTTP one
would add one request; this measures decoding).

Measured (wall clock, best of `--rounds`, interleaved so bursts of other load hit both alike): the
pyarrow pipeline - `run_task` over every segment in this one process, no Spark - for the JSON mapped
path and the Avro path: records/s on one core, the ratio Avro/JSON, and the convert stage alone. The
issue's targets: Avro >= 1.0x the JSON mapped path's records/s per core. The last line is one JSON
object with the figures.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import struct
import time
from dataclasses import replace
from pathlib import Path

import fastavro
import msgspec

from bench.workload import Workload, clear_output
from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.record_schemas import RegisteredSchema
from kafscale_iceberg.domain.runs import RegistrySettings, RunPlan, SegmentSource
from kafscale_iceberg.domain.value_formats import AVRO
from kafscale_iceberg.exceptions import SchemaNotFoundError
from kafscale_iceberg.segments.decode import Record, decode_segment
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch

SCHEMA_ID = 1
PIZZA_AVRO = {
    "type": "record",
    "name": "PizzaOrder",
    "namespace": "bench",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "store_id", "type": "int"},
        {"name": "customer", "type": "string"},
        {
            "name": "items",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Item",
                    "fields": [
                        {"name": "pizza", "type": "string"},
                        {"name": "size", "type": "string"},
                        {"name": "qty", "type": "int"},
                    ],
                },
            },
        },
        {"name": "total", "type": "double"},
        {"name": "status", "type": "string"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "ordered_on", "type": {"type": "int", "logicalType": "date"}},
    ],
}


class InMemoryRegistry:
    """The benchmark's `RecordSchemaRegistry`: one schema, in memory (see the module docstring)."""

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        if schema_id != SCHEMA_ID:
            raise SchemaNotFoundError(f"schema id {schema_id}")
        return RegisteredSchema(schema_id=SCHEMA_ID, schema_type="AVRO", text=json.dumps(PIZZA_AVRO))

    def latest_schema(self, subject: str) -> RegisteredSchema:
        return self.schema_by_id(SCHEMA_ID)


def avro_workload(workload: Workload) -> Workload:
    """The same events re-encoded as Avro wire bytes in segments of the same batches, and a plan
    reading them with `value_format: avro` onto the same columns."""
    plan = workload.plan
    assert plan.source.root is not None
    root = workload.root / "avro_segments"
    parsed = fastavro.parse_schema(PIZZA_AVRO)
    prefix = b"\x00" + struct.pack(">I", SCHEMA_ID)
    decode_json = msgspec.json.Decoder().decode
    for partition in plan.partitions:
        for segment in partition.segments:
            data = (Path(plan.source.root) / segment.key).read_bytes()
            decoded = decode_segment(data, source=segment.key, partition=partition.partition)
            records = decoded.records.to_pylist()
            batches = []
            for start in range(0, len(records), 100):
                chunk = []
                for row in records[start : start + 100]:
                    event = decode_json(row["value"])
                    event["event_time"] = datetime.datetime.fromisoformat(event["event_time"]).replace(
                        tzinfo=None
                    )
                    event["ordered_on"] = datetime.date.fromisoformat(event["ordered_on"])
                    out = io.BytesIO()
                    out.write(prefix)
                    fastavro.schemaless_writer(out, parsed, event)
                    chunk.append(Record(row["offset"], row["timestamp_ms"], row["key"], out.getvalue()))
                batches.append(encode_record_batch(chunk))
            files = build_segment(batches, created_at_ms=0)
            path = root / segment.key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files.kfs)
    conversion = plan.conversion.model_copy(update={"value_format": AVRO})
    avro_plan = plan.model_copy(
        update={
            "source": SegmentSource(root=str(root)),
            "conversion": conversion,
            "schema_registry": RegistrySettings(url="http://in-memory.invalid"),
            "partitions": tuple(
                p.model_copy(
                    update={
                        "segments": tuple(
                            s.model_copy(update={"size_bytes": (root / s.key).stat().st_size})
                            for s in p.segments
                        )
                    }
                )
                for p in plan.partitions
            ),
        }
    )
    return replace(workload, plan=RunPlan.model_validate(avro_plan.model_dump()))


def _pipeline(workload: Workload) -> tuple[float, float]:
    """One `run_task` over every segment in this process: (wall seconds, convert-stage seconds)."""
    plan = workload.plan
    (task,) = plan_tasks(plan, max_tasks=1, min_task_bytes=1, max_task_bytes=2**62)
    clear_output(workload)
    started = time.perf_counter()
    report = run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore(), registry=InMemoryRegistry())
    seconds = time.perf_counter() - started
    assert report.failure is None, report.failure
    written = sum(s.records_written for s in report.segments)
    assert written == workload.records, (written, workload.records)
    assert not any(s.conversion_failures or s.records_dead_lettered for s in report.segments)
    return seconds, report.timings.convert


def measure_formats(workload: Workload, *, rounds: int) -> dict[str, object]:
    """The JSON mapped path and the Avro path over the same events (see the module docstring)."""
    avro = avro_workload(workload)
    _pipeline(workload)  # warm: imports, numba and polars
    _pipeline(avro)
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for name, chosen in (("json", workload), ("avro", avro)):
            seconds, convert = _pipeline(chosen)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, convert)
    json_rps = workload.records / best["json"][0]
    avro_rps = workload.records / best["avro"][0]
    figures: dict[str, object] = {
        "records": workload.records,
        "json_records_per_s": round(json_rps),
        "avro_records_per_s": round(avro_rps),
        "avro_vs_json": round(avro_rps / json_rps, 3),
        "json_convert_s": round(best["json"][1], 3),
        "avro_convert_s": round(best["avro"][1], 3),
        "load_average": os.getloadavg()[0],
    }
    print(f"records: {workload.records}  (one core: the pyarrow pipeline, no Spark)")
    for name in ("json", "avro"):
        seconds, convert = best[name]
        print(f"  {name:5s} {workload.records / seconds:>10,.0f} records/s   convert stage {convert:.3f} s")
    print(f"  avro / json: {avro_rps / json_rps:.2f}x (target >= 1.0x)")
    return figures
