"""The observation stage of an inferred table, one task's share: what the records' fields hold."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats.choice import decoder_for
from kafscale_iceberg.dataplane.formats.schema_cache import task_schemas
from kafscale_iceberg.dataplane.inference import ValueObserver
from kafscale_iceberg.dataplane.key_columns import key_decoder_for, key_schemas, without_key_columns
from kafscale_iceberg.dataplane.prefetch import ObjectRequest, PrefetchLimits, prefetch_objects
from kafscale_iceberg.dataplane.reports import TaskAssignment, TaskObservation
from kafscale_iceberg.dataplane.routing import RecordRouter
from kafscale_iceberg.dataplane.segment_windows import in_window
from kafscale_iceberg.dataplane.storage import segment_uri
from kafscale_iceberg.domain.inference import TableObservation
from kafscale_iceberg.domain.runs import ColumnSpec, RunPlan, TableTarget
from kafscale_iceberg.exceptions import RegistryUnavailableError, SegmentFormatError
from kafscale_iceberg.ports import ObjectReader, RecordSchemaRegistry
from kafscale_iceberg.segments.decode import decode_segment


def observe_task(
    plan: RunPlan,
    task: TaskAssignment,
    *,
    reader: ObjectReader,
    prefetch: PrefetchLimits | None = None,
    registry: RecordSchemaRegistry | None = None,
) -> TaskObservation:
    """The observation stage of an inferred table: fetch and decode one task's segments and note what
    the fields of the records it owns hold (`dataplane/inference.py`); nothing is written.

    A segment that cannot be read or decoded is passed over here: the conversion stage that follows
    meets it again and applies the run's rules (fail, quarantine) with the error named. A mapping
    with a self-described `value_format` notes the columns of each schema its records were written
    with instead (`dataplane/formats/`, through `registry`), per table when it is routed (by the
    decoded records' route field), and with a decoded `key_format` each key schema's columns as `key_`
    columns (`dataplane/key_columns.py`); a registry outage is passed over too (the conversion stage
    fails the run for it, transiently).
    """
    started = time.perf_counter()
    observers: dict[str, ValueObserver] = {}
    inferred = [m for m in plan.mappings if m.conversion.infer_columns]
    schemas = task_schemas(registry, plan.schema_registry)
    decoders = [decoder_for(m.conversion, schemas) for m in inferred]
    routers = [
        RecordRouter(m.route, run_id=plan.run_id, decoder=d) if m.route is not None else None
        for m, d in zip(inferred, decoders, strict=True)
    ]
    key_decoders = [key_decoder_for(m.conversion, schemas) for m in inferred]
    seen: dict[str, dict[str, tuple[ColumnSpec, ...]]] = {}
    requests = [ObjectRequest(segment_uri(plan.source, w.key), w.size_bytes) for w in task.segments]
    fetched = prefetch_objects(reader, requests, prefetch)
    try:
        for window, item in zip(task.segments, fetched, strict=True):
            if item.data is None:
                continue
            try:
                decoded = decode_segment(
                    item.data,
                    source=window.key,
                    partition=window.partition,
                    verify_crc=plan.conversion.verify_crc,
                )
            except SegmentFormatError:
                continue
            kept = in_window(decoded.records, window)
            if not kept.num_rows:
                continue
            values = kept.column("value").combine_chunks()
            offsets = kept.column("offset").combine_chunks()
            keys = kept.column("key").combine_chunks()
            for mapping, router, decoder, key_decoder in zip(
                inferred, routers, decoders, key_decoders, strict=True
            ):
                if decoder is not None:  # a self-described format: the records' schemas
                    try:
                        if router is not None:  # per table, its records' (routed by their decoded field)
                            for routed_to, routed in router.assign(values, decoder.decode(values)):
                                taken = pa.array(routed)
                                found = decoder.schemas_of(
                                    values.take(taken), offsets.take(taken), partition=window.partition
                                )
                                seen.setdefault(routed_to.identifier, {}).update(found)
                            continue
                        assert mapping.table is not None
                        found = decoder.schemas_of(values, offsets, partition=window.partition)
                        if key_decoder is not None:  # and the keys' (`key_columns.py`)
                            found = without_key_columns(found)
                            found.update(key_schemas(key_decoder, keys, offsets, partition=window.partition))
                    except RegistryUnavailableError:
                        continue
                    seen.setdefault(mapping.table.identifier, {}).update(found)
                    continue
                if router is None:
                    assert mapping.table is not None
                    parts: tuple[tuple[TableTarget, np.ndarray | None], ...] = ((mapping.table, None),)
                else:  # each record observed for the table it is routed to (`split`'s rules)
                    parts = router.assign(values)
                for target, positions in parts:
                    observer = observers.get(target.identifier)
                    if observer is None:
                        observer = observers[target.identifier] = ValueObserver()
                    if positions is None:
                        observer.observe(values, offsets, partition=window.partition)
                    else:
                        at = pa.array(positions)
                        observer.observe(values.take(at), offsets.take(at), partition=window.partition)
    finally:
        fetched.close()
    tables = {identifier: observer.observation() for identifier, observer in observers.items()}
    for identifier, found in seen.items():
        tables[identifier] = TableObservation(schemas=found)
    return TaskObservation(
        task_index=task.index,
        tables=tables,
        seconds=time.perf_counter() - started,
    )
