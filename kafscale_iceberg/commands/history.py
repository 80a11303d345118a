"""`kafscale-iceberg history --config FILE --topic T [--table X] [--partition P --offset O] [--json]`.

Without `--partition/--offset`: each snapshot of the topic's table (its anchor unless `--table` names
another) with its run id, time and per-partition offset range. With them: the first snapshot holding
that offset, and the SQL to read the table as of it in Spark, Trino and DuckDB. Reads the table's
metadata only. What "holds" means: `kafscale_iceberg/domain/history.py`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafscale_iceberg.domain.history import TableHistory, TopicSnapshot
    from kafscale_iceberg.services.history import OffsetLocation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`history`'s arguments."""
    parser.add_argument("--config", required=True, help="the config file (path, file:// or s3:// URI)")
    parser.add_argument("--topic", required=True, help="the topic")
    parser.add_argument("--table", help="one of the topic's tables (default: the table holding its offsets)")
    parser.add_argument("--partition", type=int, help="with --offset: the snapshot holding this record")
    parser.add_argument("--offset", type=int, help="with --partition: the record's offset")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(command=history_command)


def history_command(args: argparse.Namespace) -> int:
    """Print the history, or the snapshot holding one offset; 2 when asked for one half of the pair."""
    from kafscale_iceberg.assembly import Assembly  # noqa: PLC0415
    from kafscale_iceberg.config import load_config_from  # noqa: PLC0415
    from kafscale_iceberg.services.history import HistoryService  # noqa: PLC0415

    if (args.partition is None) != (args.offset is None):
        print("history: give --partition and --offset together (or neither, for every snapshot)")
        return 2
    config = load_config_from(args.config)
    service = HistoryService(config, Assembly(config).tables)
    if args.partition is None:
        history = service.history(args.topic, args.table)
        print(json.dumps(_history_json(history), indent=2) if args.json else render_history(history))
        return 0
    location = service.locate(args.topic, args.partition, args.offset, args.table)
    print(json.dumps(location.to_json(), indent=2) if args.json else render_location(location))
    return 0


def _history_json(history: TableHistory) -> dict[str, object]:
    return {
        "table": history.table,
        "metadata_location": history.metadata_location,
        "snapshots": [s.to_json() for s in history.snapshots],
    }


def render_history(history: TableHistory) -> str:
    """One line per snapshot, oldest first."""
    lines = [f"{history.table}: {len(history.snapshots)} snapshots of the topic (retained, oldest first)"]
    lines += [f"  {_snapshot_line(s)}" for s in history.snapshots]
    return "\n".join(lines)


def render_location(location: OffsetLocation) -> str:
    """The snapshot holding the offset and the SQL reading the table as of it."""
    return "\n".join(
        [
            f"partition {location.partition} offset {location.offset} of {location.table}: first held by",
            f"  {_snapshot_line(location.snapshot)}",
            "read the table as of it:",
            f"  Spark:  {location.queries.spark}",
            f"  Trino:  {location.queries.trino}",
            f"  DuckDB: {location.queries.duckdb}",
        ]
    )


def _snapshot_line(snapshot: TopicSnapshot) -> str:
    when = dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=dt.UTC).strftime(
        "%Y-%m-%d %H:%M:%S.%fZ"
    )
    ranges = ", ".join(
        f"p{r.partition} back to {r.start_exclusive} (removed {r.start_exclusive + 1}..{r.end_inclusive})"
        if snapshot.reset
        else f"p{r.partition} {r.start_exclusive + 1}..{r.end_inclusive}"
        for r in snapshot.ranges
    )
    kind = "offset reset" if snapshot.reset else "run"
    return f"{snapshot.snapshot_id}  {when}  {kind} {snapshot.run_id or '-'}  {ranges or 'no offsets moved'}"
