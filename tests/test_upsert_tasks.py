"""An upsert mapping's task (no Spark): records become the keys' new rows and deleted keys, and what is
not a change of its `upsert.cdc` is a dead letter with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.runs import (
    CdcFormat,
    ColumnSpec,
    ColumnType,
    RunResult,
    RunTimings,
    UpsertSettings,
)
from kafscale_iceberg.segments.decode import Record
from tests.support.spark_job import BASE_TIME_MS, SegmentFolder, make_plan

COLUMNS = (
    ColumnSpec(name="id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="name", type=ColumnType.STRING),
)


def record(offset: int, key: object, value: object) -> Record:
    """A record whose key and value are JSON (None: null; bytes: as they are)."""

    def encoded(part: object) -> bytes | None:
        if part is None or isinstance(part, bytes):
            return part
        return json.dumps(part).encode()

    return Record(offset=offset, timestamp_ms=BASE_TIME_MS + offset, key=encoded(key), value=encoded(value))


def run(tmp_path: Path, records: list[Record], **upsert: Any) -> RunResult:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(0, records)
    plan = make_plan(
        folder,
        str(tmp_path),
        ranges={0: (-1, records[-1].offset)},
        columns=COLUMNS,
        upsert=UpsertSettings(key=("id",), **upsert),
    )
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    return build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))


def rows(files: Any, *columns: str) -> list[tuple[object, ...]]:
    tables = [pq.read_table(f.uri) for f in files]
    if not tables:
        return []
    table = pa.concat_tables(tables).sort_by("offset")
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def dead_letters(result: RunResult) -> list[tuple[object, ...]]:
    return rows(result.dead_letter_files, "offset", "error_kind", "error")


def test_values_are_rows_and_tombstones_delete_the_record_keys_key(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        [
            record(0, {"id": 1}, {"id": 1, "name": "a"}),
            record(1, {"id": 1}, None),  # an object key
            record(2, 2, None),  # a bare scalar for a one-column key
            record(3, b"3", None),  # its text
            record(4, None, {"id": 4, "name": "d"}),
        ],
    )
    assert rows(result.data_files, "offset", "id", "name") == [(0, 1, "a"), (4, 4, "d")]
    assert rows(result.deleted_key_files, "offset", "id") == [(1, 1), (2, 2), (3, 3)]
    assert dead_letters(result) == []


def test_a_row_keeps_the_base_fields_of_the_record_that_wrote_it(tmp_path: Path) -> None:
    event = {"op": "u", "before": {"id": 7, "name": "x"}, "after": {"id": 7, "name": "y"}, "ts_ms": 5}
    result = run(tmp_path, [record(0, {"id": 7}, event)], cdc=CdcFormat.DEBEZIUM)
    [(offset, value, record_id, name)] = rows(result.data_files, "offset", "value", "record_id", "name")
    assert (offset, record_id, name) == (0, "orders:0:0", "y")
    assert json.loads(value) == event  # the envelope as it arrived, not only `after`


def test_debezium_writes_after_deletes_by_before_and_the_tombstone_after_a_delete_deletes_again(
    tmp_path: Path,
) -> None:
    result = run(
        tmp_path,
        [
            record(0, {"id": 1}, {"op": "c", "before": None, "after": {"id": 1, "name": "a"}}),
            record(1, {"id": 2}, {"op": "r", "before": None, "after": {"id": 2, "name": "b"}}),
            record(2, {"id": 1}, {"op": "d", "before": {"id": 1, "name": "a"}, "after": None}),
            record(3, {"id": 1}, None),
        ],
        cdc=CdcFormat.DEBEZIUM,
    )
    assert rows(result.data_files, "offset", "id", "name") == [(0, 1, "a"), (1, 2, "b")]
    assert rows(result.deleted_key_files, "offset", "id") == [(2, 1), (3, 1)]


def test_under_json_a_topic_of_plain_and_connect_enveloped_debezium_events_lands_whole(
    tmp_path: Path,
) -> None:
    def enveloped(event: dict[str, Any]) -> dict[str, Any]:  # JsonConverter with schemas.enable=true
        return {"schema": {"type": "struct", "name": "shop.orders.Envelope", "fields": []}, "payload": event}

    result = run(
        tmp_path,
        [
            record(0, {"id": 1}, {"op": "c", "before": None, "after": {"id": 1, "name": "a"}}),
            record(
                1,
                {"schema": {}, "payload": {"id": 2}},
                enveloped({"op": "c", "after": {"id": 2, "name": "b"}}),
            ),
            record(2, {"id": 1}, enveloped({"op": "u", "before": None, "after": {"id": 1, "name": "a2"}})),
            record(3, {"id": 2}, enveloped({"op": "d", "before": {"id": 2, "name": "b"}, "after": None})),
            record(4, {"id": 3}, {"op": "r", "after": {"id": 3, "name": "c"}}),
        ],
        cdc=CdcFormat.DEBEZIUM,
    )
    assert dead_letters(result) == []
    assert rows(result.data_files, "offset", "id", "name") == [
        (0, 1, "a"),
        (1, 2, "b"),
        (2, 1, "a2"),
        (4, 3, "c"),
    ]
    assert rows(result.deleted_key_files, "offset", "id") == [(3, 2)]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"id": 1, "name": "a"}, "not a Debezium event: 'op' is None"),
        ({"op": "u", "after": None}, "Debezium op 'u' without an 'after' object"),
        ({"op": "d", "before": {"name": "a"}}, "Debezium op 'd' whose 'before' lacks key column(s) id"),
        ({"schema": {}, "payload": {"op": "c"}}, "Debezium op 'c' without an 'after' object"),
        ({"schema": {}, "payload": None}, "a Kafka Connect {schema, payload} envelope whose payload"),
        (b"not json", "the value is not JSON, so not a Debezium event"),
    ],
)
def test_what_is_not_a_debezium_event_is_a_dead_letter_with_the_reason(
    tmp_path: Path, value: object, reason: str
) -> None:
    result = run(tmp_path, [record(0, {"id": 1}, value)], cdc=CdcFormat.DEBEZIUM)
    [(offset, kind, error)] = dead_letters(result)
    assert (offset, kind) == (0, "cdc_envelope")
    assert str(error).startswith(reason)
    assert result.data_files == result.deleted_key_files == ()


def test_a_record_without_its_key_column_is_a_dead_letter(tmp_path: Path) -> None:
    result = run(tmp_path, [record(0, None, {"name": "no id"}), record(1, {"id": 1}, {"id": 1})])
    [(offset, kind, error)] = dead_letters(result)
    assert (offset, kind) == (0, "required_column")
    assert "'id'" in str(error)
    assert rows(result.data_files, "offset") == [(1,)]


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "a tombstone whose record key names no key: the record key is null"),
        ({"other": 1}, "a tombstone whose record key names no key: the record key '{\"other\": 1}' lacks"),
    ],
)
def test_a_tombstone_whose_key_names_no_key_is_a_dead_letter(
    tmp_path: Path, key: object, reason: str
) -> None:
    result = run(tmp_path, [record(0, key, None)])
    [(offset, kind, error)] = dead_letters(result)
    assert (offset, kind) == (0, "tombstone")
    assert str(error).startswith(reason)


def test_tombstones_are_dead_letters_when_they_do_not_delete(tmp_path: Path) -> None:
    result = run(tmp_path, [record(0, {"id": 1}, None)], delete_on_tombstone=False)
    assert dead_letters(result) == [
        (0, "tombstone", "a tombstone (null value) and upsert.delete_on_tombstone is false")
    ]
    assert result.deleted_key_files == ()


def test_a_deleted_key_of_the_wrong_type_is_a_dead_letter_not_a_delete(tmp_path: Path) -> None:
    result = run(tmp_path, [record(0, {"id": "seven"}, None)])
    [(offset, kind, _error)] = dead_letters(result)
    assert (offset, kind) == (0, "required_column")
    assert result.deleted_key_files == ()
