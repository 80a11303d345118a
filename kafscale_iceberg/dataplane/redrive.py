"""Dead-letter rows converted again with the current mapping (`kafscale-iceberg redrive`), in pyarrow.

The rows' `value`, `key`, `timestamp_ms` and `headers` are what the run read from the segment, so the
same `RecordConverter` a run uses converts them: a record that now converts becomes a table row exactly
as a run would have written it (its `headers` string kept as it was), one that still fails becomes a
dead-letter row with its new reason. Rows without a payload (a quarantined segment's row, an LFS
record whose blob could not be read) are not converted here: the caller keeps them.
"""

from __future__ import annotations

from collections.abc import Set

import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.conversion import RecordConverter
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA
from kafscale_iceberg.domain.redrive import ConvertedDeadLetters, Pair, redrive_id
from kafscale_iceberg.domain.runs import ConversionSettings
from kafscale_iceberg.segments.decode import SEGMENT_RECORD_SCHEMA

_PAYLOAD_KINDS = frozenset({"corrupt_segment"})
"""Reasons whose row has no record to convert (a whole segment stands for its offsets)."""


def convert_dead_letters(
    topic: str, settings: ConversionSettings, dead: pa.Table, *, already: Set[Pair]
) -> ConvertedDeadLetters:
    """Convert `dead` (rows of the dead-letter schema) with `settings`, partition by partition;
    rows whose (partition, offset) is in `already` are not converted again. The redrive's id comes
    from the rows read (the same dead letters give the same id); rows still failing carry it as their
    `run_id`."""
    the_id = redrive_id(topic, dead["record_id"].to_pylist())
    pairs = list(zip(dead["partition"].to_pylist(), dead["offset"].to_pylist(), strict=True))
    done = pa.array([pair in already for pair in pairs], pa.bool_())
    previously = dead.filter(done)
    dead = dead.filter(pc.invert(done))
    has_payload = pc.and_(
        pc.is_valid(dead["value"]), pc.invert(pc.is_in(dead["error_kind"], pa.array(sorted(_PAYLOAD_KINDS))))
    )
    without = dead.filter(pc.invert(has_payload))
    convertible = dead.filter(has_payload)
    kinds = dict(
        zip(convertible["record_id"].to_pylist(), convertible["error_kind"].to_pylist(), strict=True)
    )
    converter = RecordConverter(topic=topic, run_id=the_id, settings=settings)
    rows: list[pa.Table] = []
    failing: list[pa.Table] = []
    headers = dict(zip(convertible["record_id"].to_pylist(), convertible["headers"].to_pylist(), strict=True))
    for partition in sorted(set(convertible["partition"].to_pylist())):
        part = convertible.filter(pc.equal(convertible["partition"], partition)).sort_by("offset")
        converted = converter.convert(_records(part), partition=partition, segment_key="")
        rows.append(_with_headers(converted.rows, headers))
        failing.append(_with_headers(converted.dead_letters, headers).cast(DEAD_LETTER_SCHEMA))
    landed_rows = pa.concat_tables(rows) if rows else converter.schema.empty_table()
    failing_rows = pa.concat_tables(failing) if failing else DEAD_LETTER_SCHEMA.empty_table()
    landed_ids = landed_rows["record_id"].to_pylist()
    return ConvertedDeadLetters(
        redrive_id=the_id,
        rows=landed_rows,
        failing=failing_rows,
        landed=tuple(
            ((p, o), kinds[i])
            for i, p, o in zip(
                landed_ids,
                landed_rows["partition"].to_pylist(),
                landed_rows["offset"].to_pylist(),
                strict=True,
            )
        ),
        already_landed=tuple(previously["error_kind"].to_pylist()),
        failing_kinds=tuple(failing_rows["error_kind"].to_pylist()),
        no_payload=tuple(without["error_kind"].to_pylist()),
        resolved_ids=(
            *landed_ids,
            *previously["record_id"].to_pylist(),
            *failing_rows["record_id"].to_pylist(),
        ),
    )


def _records(dead: pa.Table) -> pa.Table:
    """Dead-letter rows as the decoded records a segment gave (headers restored afterwards)."""
    count = dead.num_rows
    return pa.Table.from_arrays(
        [
            dead["partition"].cast(pa.int32()),
            dead["offset"].cast(pa.int64()),
            pc.fill_null(dead["timestamp_ms"], 0).cast(pa.int64()),
            dead["key"].cast(pa.binary()),
            dead["value"].cast(pa.binary()),
            pa.array([[]] * count, SEGMENT_RECORD_SCHEMA.field("headers").type),
        ],
        schema=SEGMENT_RECORD_SCHEMA,
    )


def _with_headers(table: pa.Table, headers: dict[str, str | None]) -> pa.Table:
    """`table` with each row's `headers` string as the dead letter kept it."""
    restored = pa.array([headers.get(i) or "" for i in table["record_id"].to_pylist()], pa.string())
    index = table.schema.get_field_index("headers")
    return table.set_column(index, table.schema.field(index), restored)
