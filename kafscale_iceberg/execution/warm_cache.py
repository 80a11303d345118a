"""Fill numba's on-disk cache by running one small plan in-process
(`python -m kafscale_iceberg.execution.warm_cache`).

The Lambda runner's image runs it at build time (`infra/lambda/runner.Dockerfile`, with
`NUMBA_CACHE_DIR` and `NUMBA_CPU_NAME=generic` so the cache fits any CPU of the architecture), so a
cold start loads the compiled kernels instead of compiling them (seconds each). The plans are
synthetic, one segment each on a local folder, mapped to typed columns, and run as a real run does,
so each kernel is compiled for the argument types a run passes it: JSON records (the record walker
and JSON scanner), Avro in Confluent wire format (the demo's pizzas, `local/demo_avro.py`: the
payload check, `formats/avro_skip.py`) and Protobuf (the wire reader, `formats/protobuf_wire.py`),
their schemas served by the in-process registry (`local/schema_registry.py`) on loopback. Exits 1
when a run failed.
"""

from __future__ import annotations

import json
import random
import struct
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    PartitionPlan,
    PlannedSegment,
    RegistrySettings,
    RunPlan,
    RunResult,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.domain.value_formats import AVRO, PROTOBUF
from kafscale_iceberg.execution.in_process import run_plan_in_process
from kafscale_iceberg.local import demo_avro
from kafscale_iceberg.local.schema_registry import StandInRegistry, serve_registry
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.segments.layout import Codec

_COLUMNS = (
    ColumnSpec(name="id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="name", type=ColumnType.STRING),
    ColumnSpec(name="price", type=ColumnType.DOUBLE),
    ColumnSpec(name="at", type=ColumnType.TIMESTAMP),
    ColumnSpec(name="active", type=ColumnType.BOOLEAN),
)


_PIZZA_COLUMNS = (
    ColumnSpec(name="pizza_id", type=ColumnType.LONG),
    ColumnSpec(name="name", type=ColumnType.STRING),
    ColumnSpec(name="price", type=ColumnType.DOUBLE),
    ColumnSpec(name="slices", type=ColumnType.INT),
)
_PIZZA_PROTO = """syntax = "proto3";
package warm;
message Pizza { int64 pizza_id = 1; string name = 2; double price = 3; int32 slices = 4; }
"""


def warm_plan(root: Path, records: int = 200) -> RunPlan:
    """A plan over one synthetic segment of `records` JSON records written under `root`."""
    values = [
        json.dumps(
            {"id": i, "name": f"n-{i}", "price": i + 0.5, "at": "2026-11-26T10:00:00Z", "active": i % 2 == 0}
        ).encode()
        for i in range(records)
    ]
    return _plan(root, "warm", values, ConversionSettings(columns=_COLUMNS))


def registered_warm_plans(root: Path, registry: StandInRegistry, records: int = 200) -> list[RunPlan]:
    """Plans over one synthetic segment each of `records` pizzas in Confluent wire format: Avro (the
    demo's topic, both schema versions) and Protobuf, their schemas put in `registry`."""
    demo_avro.register_schemas(registry)
    proto_id = registry.register("warm_protobuf-value", _PIZZA_PROTO, schema_type="PROTOBUF")
    encode = demo_avro.wire_encoder()
    rng = random.Random(0)
    pizzas = [demo_avro.pizza(rng, offset, 0) for offset in range(records)]
    avro_values = [encode(pizza, offset) for offset, pizza in enumerate(pizzas)]
    proto_values = []
    for pizza in pizzas:
        name = pizza["name"].encode()
        message = (  # fields 1 (varint), 2 (length-delimited), 3 (64-bit), 4 (varint)
            b"\x08" + _uvarint(pizza["pizza_id"]) + b"\x12" + _uvarint(len(name)) + name
            + b"\x19" + struct.pack("<d", pizza["price"]) + b"\x20" + _uvarint(pizza["slices"])
        )  # fmt: skip
        proto_values.append(b"\x00" + struct.pack(">I", proto_id) + b"\x00" + message)  # message [0]
    registry_settings = RegistrySettings(url=registry.url)
    return [
        _plan(
            root,
            f"warm_{value_format.name}",
            values,
            ConversionSettings(columns=_PIZZA_COLUMNS, value_format=value_format),
            registry_settings,
        )
        for value_format, values in ((AVRO, avro_values), (PROTOBUF, proto_values))
    ]


def _uvarint(n: int) -> bytes:
    """Protobuf's unsigned varint of `n` >= 0."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _plan(
    root: Path,
    topic: str,
    values: Sequence[bytes],
    conversion: ConversionSettings,
    registry: RegistrySettings | None = None,
) -> RunPlan:
    records = len(values)
    batch = [
        Record(offset=i, timestamp_ms=1_795_132_800_000 + i, key=f"k{i}".encode(), value=v, headers=())
        for i, v in enumerate(values)
    ]
    files = build_segment([encode_record_batch(batch, codec=Codec.NONE)], created_at_ms=1_795_132_800_000)
    key = format_segment_key("warm", topic, 0, files.base_offset)
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_bytes(files.kfs)
    run_id = make_run_id(topic, [(0, -1, records - 1)])
    segment = PlannedSegment(
        key=key, base_offset=files.base_offset, last_offset=files.last_offset, size_bytes=len(files.kfs)
    )
    return RunPlan(
        run_id=run_id,
        topic=topic,
        created_at_ms=1_795_132_800_000,
        source=SegmentSource(root=str(root)),
        partitions=(
            PartitionPlan(partition=0, start_exclusive=-1, end_inclusive=records - 1, segments=(segment,)),
        ),
        table=TableTarget(identifier=f"warm.{topic}", data_uri=str(root / "data" / run_id)),
        dead_letter_table=TableTarget(identifier=f"warm.{topic}_dlq", data_uri=str(root / "dlq" / run_id)),
        conversion=conversion,
        result_uri=str(root / "runs" / run_id / "result.json"),
        schema_registry=registry,
    )


def warm() -> list[RunResult]:
    """Run the synthetic plans once in a temporary folder; their results (JSON, Avro, Protobuf)."""
    with tempfile.TemporaryDirectory(prefix="kafscale-warm-") as folder, serve_registry() as registry:
        root = Path(folder)
        results = []
        for plan in (warm_plan(root), *registered_warm_plans(root, registry)):
            plan_uri = str(root / "runs" / plan.run_id / "plan.json")
            Path(plan_uri).parent.mkdir(parents=True, exist_ok=True)
            Path(plan_uri).write_text(plan.model_dump_json())
            results.append(run_plan_in_process(plan_uri, workers=1))
        return results


def main() -> int:
    """Warm the cache; 0 when every run succeeded."""
    results = warm()
    for result in results:
        print(
            f"numba cache warmed: {result.topic} run {result.status.value}, {result.counts.written} records"
        )
    return 0 if all(r.failure is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
