"""One segment's records against its window: the records it owns, the overlapped ones it counts, the
outcome it reports, and a corrupt segment quarantined.

A record outside its segment's window is not written; one inside the run's range (owned by the next
segment: an overlap) is counted `out_of_range` (`records_total{result="overlapped"}`), while one at or
before the committed offset (a segment read again from its start) or after the run's end is not
counted - it is neither repeated nor lost.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.conversion import corrupt_segment_row
from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter
from kafscale_iceberg.dataplane.reports import SegmentOutcome, SegmentWindow
from kafscale_iceberg.domain.runs import QuarantinedSegment, RunPlan
from kafscale_iceberg.exceptions import SegmentFormatError
from kafscale_iceberg.segments.decode import FramedBatch


def in_window(records: pa.Table, window: SegmentWindow) -> pa.Table:
    """The records whose offset the segment owns (offsets increase, so usually all or a slice)."""
    if records.num_rows == 0:
        return records
    offsets = records.column("offset")
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first >= window.first_owned and last <= window.last_owned:
        return records
    inside = pc.and_(pc.greater_equal(offsets, window.first_owned), pc.less_equal(offsets, window.last_owned))
    return records.filter(inside)


def overlapped(records: pa.Table, window: SegmentWindow) -> int:
    """Records of the run's range that another segment owns (an overlap): not written here, counted.

    Records at or before the committed offset (a segment read again from its start) and after the
    run's end are not counted: they are neither repeated nor lost."""
    if records.num_rows == 0:
        return 0
    offsets = records.column("offset")
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first >= window.first_owned and last <= window.last_owned:
        return 0
    in_range = pc.and_(
        pc.greater_equal(offsets, window.range_first), pc.less_equal(offsets, window.range_last)
    )
    owned = pc.and_(pc.greater_equal(offsets, window.first_owned), pc.less_equal(offsets, window.last_owned))
    return int(pc.sum(pc.and_(in_range, pc.invert(owned)).cast(pa.int64())).as_py() or 0)


def segment_outcome(
    window: SegmentWindow,
    *,
    batches: Sequence[FramedBatch],
    kept: pa.Table,
    written: int,
    dead_lettered: int,
    out_of_range: int,
    size: int,
    header_keys_replaced: int = 0,
) -> SegmentOutcome:
    """What a segment's task did: the offsets its batches cover inside its window, the records kept,
    written, dead-lettered and overlapped, the last timestamp seen."""
    covered: list[tuple[int, int]] = []
    control = 0
    for batch in batches:
        header = batch.header
        control += int(header.is_control)
        first = max(header.base_offset, window.first_owned)
        last = min(header.base_offset + header.last_offset_delta, window.last_owned)
        if first > last:
            continue
        if covered and first <= covered[-1][1] + 1:
            covered[-1] = (covered[-1][0], max(covered[-1][1], last))
        else:
            covered.append((first, last))
    first_offset = last_offset = max_timestamp = None
    if kept.num_rows:
        offsets = kept.column("offset").to_numpy()
        first_offset, last_offset = int(offsets[0]), int(offsets[-1])
        max_timestamp = int(np.max(kept.column("timestamp_ms").to_numpy()))
    return SegmentOutcome(
        partition=window.partition,
        key=window.key,
        size_bytes=size,
        covered=tuple(covered),
        records_written=written,
        records_dead_lettered=dead_lettered,
        out_of_range=out_of_range,
        control_batches=control,
        header_keys_replaced=header_keys_replaced,
        first_offset=first_offset,
        last_offset=last_offset,
        max_timestamp_ms=max_timestamp,
    )


def quarantine(
    plan: RunPlan,
    window: SegmentWindow,
    error: SegmentFormatError,
    size: int,
    dead_writer: RollingParquetWriter,
) -> SegmentOutcome:
    """A corrupt segment (policy `quarantine`) as one dead-letter row naming its offsets and the byte
    that failed; its outcome."""
    # The offsets this run was to take from the segment: its window, cut at the planned last offset.
    first = window.first_owned
    last = min(window.last_owned, max(window.last_offset, first))
    message = f"byte {error.position}: {error.problem}"
    dead_writer.write(
        {},
        corrupt_segment_row(
            topic=plan.topic,
            partition=window.partition,
            segment_key=window.key,
            base_offset=first,
            last_offset=last,
            error=message,
            run_id=plan.run_id,
        ),
    )
    return SegmentOutcome(
        partition=window.partition,
        key=window.key,
        size_bytes=size,
        records_dead_lettered=1,
        dead_letter_reasons={"corrupt_segment": 1},
        quarantined=QuarantinedSegment(key=window.key, base_offset=first, last_offset=last, error=message),
    )
