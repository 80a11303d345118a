"""Protobuf values against the JSON mapped path: the conversion stage, records/s on one core.

Run with `make bench-spark BENCH_SPARK_ARGS="--format protobuf"` (or `python -m bench.protobuf_values`).
Workload: the Spark benchmark's pizza orders (`segments.generate`, one segment of 20,000 records),
decoded from the segment once; the same orders re-encoded as Protobuf in Confluent wire format
(`shop.PizzaOrder`: int64, int32, string, repeated message, double, string, `Timestamp`, string).
Measured, interleaved over `--rounds` rounds in one process (best run each): `RecordConverter.convert`
(what a Spark task runs per segment after fetching it) over the JSON values with the benchmark's 7
mapping columns, and over the Protobuf values with the same 7 columns given (`schema.columns`:
fields projected by name; the decoder's compiled wire reader reads them from the payload bytes,
checking the unread `items` messages as it goes, and conforms them). The ratio is the issue's target
(>= 0.6x).

The protobuf runtime's implementation is chosen per process (`PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION`,
read when protobuf is first imported): the bench runs itself twice, once with `upb` (compiled; what
every process of the product uses) and once with `python` (what a process gets where upb is not
installed or the variable chooses it), and reports both; the wire reader does not use the runtime
per record, so the two should agree. Schemas come from an in-memory registry (a registry is asked
once per schema id per task; it is not what is measured). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Item { string pizza = 1; string size = 2; int32 qty = 3; }
message PizzaOrder {
  int64 order_id = 1;
  int32 store_id = 2;
  string customer = 3;
  repeated Item items = 4;
  double total = 5;
  string status = 6;
  google.protobuf.Timestamp event_time = 7;
  string ordered_on = 8;
}
"""
TARGET = 0.6


def _measure(rounds: int) -> dict[str, object]:
    """The two conversions on the same records in this process (see the module docstring)."""
    import base64
    import datetime

    import pyarrow as pa
    from google.protobuf.internal import api_implementation

    from bench.spark import COLUMNS
    from kafscale_iceberg.dataplane.conversion import RecordConverter
    from kafscale_iceberg.dataplane.formats.protobuf_schemas import _protoc, message_class
    from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
    from kafscale_iceberg.domain.record_schemas import RegisteredSchema
    from kafscale_iceberg.domain.runs import ConversionSettings
    from kafscale_iceberg.domain.value_formats import PROTOBUF
    from kafscale_iceberg.segments.decode import decode_segment
    from kafscale_iceberg.segments.generate import generate_segments

    (segment,) = generate_segments(
        topics=("orders",), partitions=1, segments=1, batches_per_segment=200, records_per_batch=100
    )
    records = decode_segment(segment.files.kfs, source="bench", partition=0).records
    files = {f.name: f for f in _protoc({"order.proto": PROTO}, "bench")}
    order_file = files["order.proto"]
    serialized = base64.b64encode(order_file.SerializeToString()).decode()

    class Registry:
        def schema_by_id(self, schema_id: int) -> RegisteredSchema:
            return RegisteredSchema(schema_id=1, schema_type="PROTOBUF", text=serialized)

        def latest_schema(self, subject: str) -> RegisteredSchema:
            return self.schema_by_id(1)

        def schema_version(self, subject: str, version: int) -> RegisteredSchema:
            return self.schema_by_id(1)

    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    for compiled in files.values():  # protoc lists the imports first
        pool.Add(compiled)
    order_class = message_class(pool.FindMessageTypeByName("shop.PizzaOrder"))
    encoded = []
    for value in records.column("value").to_pylist():
        event = json.loads(value)
        when = datetime.datetime.fromisoformat(event.pop("event_time"))
        order = order_class(**{k: v for k, v in event.items() if k != "items"})
        for item in event["items"]:
            order.items.add(**item)
        order.event_time.FromDatetime(when)
        encoded.append(b"\x00\x00\x00\x00\x01\x02\x02" + order.SerializeToString())  # message index [1]
    proto_records = records.set_column(
        records.schema.get_field_index("value"),
        "value",
        pa.array(encoded, records.schema.field("value").type),
    )
    json_converter = RecordConverter(
        topic="orders", run_id="bench", settings=ConversionSettings(columns=COLUMNS)
    )
    proto_settings = ConversionSettings(columns=COLUMNS, value_format=PROTOBUF)
    schemas = SchemaCache(Registry())
    proto_converter = RecordConverter(
        topic="orders", run_id="bench", settings=proto_settings, schemas=schemas
    )

    def timed(run: Callable[[], object]) -> float:
        started = time.perf_counter()
        run()
        return time.perf_counter() - started

    def convert_json() -> object:
        return json_converter.convert(records, partition=0, segment_key="bench")

    def convert_proto() -> object:
        return proto_converter.convert(proto_records, partition=0, segment_key="bench")

    json_rows = convert_json().rows.num_rows  # type: ignore[attr-defined]
    proto_result = convert_proto()
    assert proto_result.rows.num_rows == json_rows == records.num_rows, "the two paths disagree"  # type: ignore[attr-defined]
    assert proto_result.rows.select([c.name for c in COLUMNS]).equals(  # type: ignore[attr-defined]
        convert_json().rows.select([c.name for c in COLUMNS])  # type: ignore[attr-defined]
    ), "the Protobuf path's columns differ from the JSON path's"
    json_best = proto_best = float("inf")
    for _ in range(rounds):
        json_best = min(json_best, timed(convert_json))
        proto_best = min(proto_best, timed(convert_proto))
    count = records.num_rows
    return {
        "implementation": api_implementation.Type(),
        "records": count,
        "json_records_per_s": round(count / json_best),
        "protobuf_records_per_s": round(count / proto_best),
        "ratio": round(json_best / proto_best, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--format", choices=["protobuf"], default="protobuf", help="what `make bench-spark` passes"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_measure(args.rounds)))
        return 0
    results = []
    for implementation in ("upb", "python"):
        env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": implementation}
        command = [sys.executable, "-m", "bench.protobuf_values", "--child", "--rounds", str(args.rounds)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(result)
        print(
            f"protobuf ({result['implementation']}): {result['protobuf_records_per_s']:,} records/s; "
            f"JSON mapped: {result['json_records_per_s']:,} records/s; ratio {result['ratio']:.2f}x "
            f"(target >= {TARGET}x)"
        )
    print(json.dumps({"protobuf_vs_json": results, "target": TARGET, "load": os.getloadavg()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
