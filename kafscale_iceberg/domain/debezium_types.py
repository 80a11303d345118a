"""Debezium's temporal types (`io.debezium.time.*`, the schema `name` of a Connect field or the
`connect.name` of an Avro one) read as what they mean, not as their physical integer.

Debezium writes a `DATETIME`/`timestamp` column as an `int64` named `io.debezium.time.Timestamp`
(epoch milliseconds, wall time without a zone) or `io.debezium.time.MicroTimestamp` (microseconds),
a `DATE` as an `int32` named `io.debezium.time.Date` (days). Read as plain integers they would land
in a `timestamp` column as one unit whatever theirs (milliseconds: `dataplane/datetimes.py`) - a
microsecond value 1000 times too large - so both record formats that carry them map them here:

| Debezium type | column | value |
|---|---|---|
| `io.debezium.time.Timestamp` | `timestamp` | milliseconds x 1000 |
| `io.debezium.time.MicroTimestamp` | `timestamp` | microseconds |
| `io.debezium.time.Date` | `date` | days |
| `io.debezium.time.Time` | `time` | milliseconds since midnight x 1000 |
| `io.debezium.time.MicroTime` | `time` | microseconds since midnight |

(`io.debezium.time.NanoTimestamp` stays `long`, as Avro's nanosecond types do: Iceberg v2 has no
nanosecond type and a timestamp is never rounded; `ZonedTimestamp` is ISO text, which a
`timestamptz` column parses.) `connect_json` reads them in `dataplane/formats/connect_json.py`;
Avro schemas get the matching logical type (`avro_logical_type`) before they are read.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafscale_iceberg.domain.runs import ColumnType

TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
DATE = "io.debezium.time.Date"
TIME = "io.debezium.time.Time"
MICRO_TIME = "io.debezium.time.MicroTime"

COLUMN_TYPES: Mapping[str, ColumnType] = {
    TIMESTAMP: ColumnType.TIMESTAMP,
    MICRO_TIMESTAMP: ColumnType.TIMESTAMP,
    DATE: ColumnType.DATE,
    TIME: ColumnType.TIME,
    MICRO_TIME: ColumnType.TIME,
}
"""The column each Debezium temporal type lands as."""

MICROS_PER_UNIT: Mapping[str, int] = {TIMESTAMP: 1000, MICRO_TIMESTAMP: 1}
"""A Debezium timestamp's value times this is microseconds since the epoch."""

TIME_MICROS_PER_UNIT: Mapping[str, int] = {TIME: 1000, MICRO_TIME: 1}
"""A Debezium time of day's value times this is microseconds since midnight."""

_AVRO_LOGICAL_TYPES: Mapping[tuple[str, str], str] = {
    ("long", TIMESTAMP): "local-timestamp-millis",
    ("long", MICRO_TIMESTAMP): "local-timestamp-micros",
    ("int", DATE): "date",
    ("int", TIME): "time-millis",
    ("long", MICRO_TIME): "time-micros",
}


def avro_logical_type(physical: object, connect_name: object) -> str | None:
    """The Avro logical type a Debezium temporal type means (None for any other type)."""
    if not isinstance(physical, str) or not isinstance(connect_name, str):
        return None
    return _AVRO_LOGICAL_TYPES.get((physical, connect_name))
