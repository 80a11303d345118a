"""Each value format is described once (`domain/value_formats.py`): every spec answers every capability,
every decoder it names imports, and a new format is one module plus one registry line - shown by a toy
format (`tests/support/toy_format.py`) that, registered by that one line, is accepted by the config
under its own capabilities and lands records through the task code as the built-in formats do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.formats.choice import decoder_factory, decoder_for
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, ConversionSettings, RunStatus, RunTimings
from kafscale_iceberg.domain.value_formats import VALUE_FORMATS, SchemaKind, ValueFormatSpec
from kafscale_iceberg.exceptions import ConfigError
from tests.support.spark_job import SegmentFolder, make_plan, order_record
from tests.support.toy_format import ToyDecoder
from tests.test_config import load, problems_of
from tests.test_record_formats_config import with_mapping

TOY = ValueFormatSpec(
    name="toy", schema_kind=SchemaKind.INLINE, upsert=False, key=False, named_message=False,
    decoder="tests.support.toy_format:decoder",
)  # fmt: skip
"""The toy's registry line."""


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> ValueFormatSpec:
    """The toy format's one line added to the registry, for this test only."""
    monkeypatch.setitem(VALUE_FORMATS, TOY.name, TOY)
    return TOY


def test_a_spec_without_an_answer_for_a_capability_is_refused() -> None:
    answers = {f.name: getattr(value_formats.AVRO, f.name) for f in dataclasses.fields(ValueFormatSpec)}
    for capability in answers:
        missing = {k: v for k, v in answers.items() if k != capability}
        with pytest.raises(TypeError, match=capability):
            ValueFormatSpec(**missing)


@pytest.mark.parametrize("spec", list(VALUE_FORMATS.values()), ids=list(VALUE_FORMATS))
def test_every_registered_format_answers_every_capability_and_its_decoder_imports(
    spec: ValueFormatSpec,
) -> None:
    for field in dataclasses.fields(ValueFormatSpec):
        if field.name != "decoder":
            assert getattr(spec, field.name) is not None, f"{spec.name} does not answer {field.name}"
    assert VALUE_FORMATS[spec.name] is spec
    factory = decoder_factory(spec)
    assert (factory is None) == (spec.decoder is None)
    if factory is not None:
        settings = ConversionSettings(value_format=spec)
        assert hasattr(factory(settings, None, part="value"), "decode")


def test_a_schemaless_format_is_not_taken_for_a_self_described_one() -> None:
    plain = dataclasses.replace(TOY, name="csv", schema_kind=SchemaKind.NONE, decoder=None)
    assert not plain.self_described
    assert not plain.registered
    assert TOY.self_described
    assert not TOY.registered


def test_an_unknown_value_format_is_refused_naming_the_ones_read() -> None:
    problem = problems_of(with_mapping(value_format="csv"))["mappings[0].value_format"]
    assert "csv" in problem
    assert "avro, connect_json, json, json_schema, protobuf" in problem


def test_a_decoder_that_does_not_import_is_a_config_error_naming_the_format() -> None:
    broken = dataclasses.replace(TOY, decoder="tests.support.no_such_module:decoder")
    with pytest.raises(ConfigError, match="toy's decoder"):
        decoder_for(ConversionSettings(value_format=broken), None)


def test_the_toy_format_is_read_by_the_config_under_its_own_capabilities(
    toy_registered: ValueFormatSpec,
) -> None:
    config = load(with_mapping(value_format="TOY"))
    assert config.mappings[0].value_format is toy_registered
    columns = {"columns": [{"name": "id", "type": "string", "required": True}]}
    problems = problems_of(
        with_mapping(value_format="toy", mode="upsert", upsert={"key": ["id"]}, schema=columns)
    )
    assert "is not supported with value_format toy" in problems["mappings[0].upsert"]
    assert (
        "keys cannot be written in toy"
        in problems_of(with_mapping(key_format="toy"))["mappings[0].key_format"]
    )
    unknown = problems_of(with_mapping(value_format="csv"))["mappings[0].value_format"]
    assert "json_schema, protobuf, toy)" in unknown


def test_the_toy_format_lands_records_through_the_task_code(
    tmp_path: Path, toy_registered: ValueFormatSpec
) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    values = [b"order_id=1;customer=ann", b"order_id=2;customer=bob", b"order_id", b"customer=cy;order_id=3"]
    folder.add(0, [order_record(offset, 0, value=value) for offset, value in enumerate(values)])
    columns = (
        ColumnSpec(name="order_id", type=ColumnType.LONG, required=True),
        ColumnSpec(name="customer", type=ColumnType.STRING),
    )
    plan = make_plan(folder, str(tmp_path / "out"), ranges={0: (-1, 3)}, columns=columns, value_format="toy")
    assert plan.conversion.value_format is toy_registered
    assert isinstance(decoder_for(plan.conversion, None), ToyDecoder)
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
    assert result.status is RunStatus.SUCCEEDED
    rows = [
        row for f in result.data_files for row in pq.read_table(f.uri.removeprefix("file://")).to_pylist()
    ]
    assert sorted((r["offset"], r["order_id"], r["customer"]) for r in rows) == [
        (0, 1, "ann"),
        (1, 2, "bob"),
        (3, 3, "cy"),
    ]
    dead = [
        row
        for f in result.dead_letter_files
        for row in pq.read_table(f.uri.removeprefix("file://")).to_pylist()
    ]
    assert [(r["offset"], r["error_kind"]) for r in dead] == [(2, "undecodable")]
    assert "has no '='" in dead[0]["error"]
