"""`kafscale-iceberg status --config FILE [--json]`: where each mapped topic and partition stands.

Reads only: the tables' markers and snapshots, the checkpoint store (offsets, leases), S3 listings after
the committed offsets, and the run documents of aborted attempts. A readable table by default, the
`StatusReport` as JSON with `--json`. What each value means: `kafscale_iceberg/services/status.py`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafscale_iceberg.domain.commits import QuarantinedRange
    from kafscale_iceberg.services.status import PartitionStatus, StatusReport, TopicStatus

_GAPS_SHOWN = 5
"""Gap ranges listed per partition in the text (all of them are in `--json`)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`status`'s arguments."""
    parser.add_argument("--config", required=True, help="the config file (path, file:// or s3:// URI)")
    parser.add_argument("--json", action="store_true", help="print the status as one JSON document")
    parser.add_argument(
        "--strict-config",
        action="store_true",
        help="fail at start on an unknown (e.g. misspelled) config key instead of warning",
    )
    parser.set_defaults(command=status_command)


def status_command(args: argparse.Namespace) -> int:
    """Print the status of every mapped topic; 0 once printed (errors reading it end the command)."""
    from kafscale_iceberg.assembly import Assembly  # noqa: PLC0415
    from kafscale_iceberg.config import load_config_from  # noqa: PLC0415
    from kafscale_iceberg.local.preflight import check_before_start  # noqa: PLC0415
    from kafscale_iceberg.services.status import StatusService  # noqa: PLC0415

    config = load_config_from(args.config, strict=args.strict_config)
    check_before_start(config, command="status")
    assembly = Assembly(config)
    service = StatusService(
        config,
        assembly.checkpoints,
        assembly.segments,
        assembly.tables,
        assembly.documents,
        health=assembly.table_maintainer,
        tables_of=assembly.tables_of,
    )
    report = service.report()
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_status(report))
    return 0


def render_status(report: StatusReport) -> str:
    """The report as text: one block per topic, one table row per partition."""
    blocks = [f"status at {_time(report.generated_at_ms)}"]
    blocks += [_render_topic(topic) for topic in report.topics]
    if not report.topics:
        blocks.append("no mapped topics")
    return "\n\n".join(blocks)


def _render_topic(topic: TopicStatus) -> str:
    table = topic.table if topic.table_exists else f"{topic.table} (not created yet)"
    lines = [f"{topic.topic} -> {table}"]
    if topic.last_commit_ms is None:
        lines.append("  last commit   never")
    else:
        source = "table snapshot" if topic.last_commit_source == "table" else "checkpoint store"
        run = f", run {topic.last_run_id}" if topic.last_run_id else ""
        lines.append(f"  last commit   {_time(topic.last_commit_ms)} ({source}{run})")
    lease = topic.lease
    if lease is None:
        lines.append("  lease         free (no run in flight)")
    elif lease.go_processor_partition is not None:
        lines.append(
            f"  lease         KafScale Go processor {lease.owner_id} on partition "
            f"{lease.go_processor_partition}: stop it before this product runs the topic"
        )
    else:
        since = f" since {_time(lease.since_ms)}" if lease.since_ms else ""
        lines.append(f"  lease         {lease.owner_id}, run in flight {lease.run_id}{since}")
    lines.append(f"  failures      {topic.consecutive_failures} consecutive")
    if topic.backlog is not None and topic.backlog.pending_bytes:
        lines.append(f"  backlog       {topic.backlog.message()}")
    health = topic.health
    if health is not None:
        lines.append(
            f"  table health  {health.files} files ({health.small_files} small), "
            f"{health.snapshots} snapshots, "
            f"last maintenance {_time(health.last_maintenance_ms)}, "
            f"last compaction {_time(health.last_compaction_ms)}"
            + ("; compaction by Amazon S3 Tables (maintain leaves it)" if health.managed_compaction else "")
        )
    if topic.upsert is not None:
        u = topic.upsert
        lines.append(
            f"  upsert: {u.inserted} inserted, {u.updated} updated, {u.deleted} deleted; "
            f"{u.files_rewritten} files ({u.bytes_rewritten} bytes) rewritten (retained snapshots)"
        )
    if topic.conversion_failures:
        listed = ", ".join(f"{column} {count}" for column, count in topic.conversion_failures.items())
        lines.append(f"  not converted {listed} (stored null; the value column keeps them)")
    lines += [f"  WARNING last run: no record fills {text}" for text in topic.unfilled_columns.values()]
    if topic.dead_letters:
        listed = ", ".join(f"{kind} {count}" for kind, count in topic.dead_letters.items())
        lines.append(f"  dead letters {listed} (rows of the dead-letter table, by error_kind)")
    for line in topic.tables:
        if not line.exists:
            lines.append(f"  also -> {line.identifier} (not created yet)")
            continue
        offsets = ", ".join(f"{p}:{o}" for p, o in sorted((line.offsets or {}).items())) or "none"
        run = f", run {line.last_run_id}" if line.last_run_id else ""
        failures = ", ".join(f"{c} {n}" for c, n in line.conversion_failures.items())
        lines.append(
            f"  also -> {line.identifier}: offsets {offsets} (last commit {_time(line.last_commit_ms)}{run})"
            + (f"; not converted {failures}" if failures else "")
            + (
                f"; AHEAD of the anchor on partitions {list(line.ahead_of_anchor)}: a run stopped between "
                "its tables' commits (the topic's next commit finishes it)"
                if line.ahead_of_anchor
                else ""
            )
        )
    rows: list[Sequence[str]] = [
        (
            "partition",
            "committed",
            "table",
            "store",
            "newest",
            "lag",
            "lag_s",
            "wm_age_s",
            "pending",
            "store updated",
        )
    ]
    for p in topic.partitions:
        pending = str(p.pending_segments) + (" (blocked)" if p.blocked_segment else "")
        rows.append(
            (
                str(p.partition),
                str(p.committed_offset),
                "-" if p.table_offset is None else str(p.table_offset),
                str(p.store_offset) + ("" if p.table_offset in (None, p.store_offset) else " (differs)"),
                str(p.newest_offset),
                str(p.lag_records),
                f"{p.lag_seconds:.1f}",
                "-" if p.watermark_age_seconds is None else f"{p.watermark_age_seconds:.1f}",
                pending,
                _time(p.store_updated_at_ms) if p.store_updated_at_ms else "-",
            )
        )
    if len(rows) == 1:
        lines.append("  no partitions yet (no segments, nothing committed)")
    else:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
    blocked = [p for p in topic.partitions if p.blocked_segment]
    lines += [f"  partition {p.partition} waits for the .index of {p.blocked_segment}" for p in blocked]
    lines += [f"  partition {p.partition} waits: {p.problem}" for p in topic.partitions if p.problem]
    lines += [_gaps_line(p) for p in topic.partitions if p.offset_gaps.missing]
    lines += [
        f"  partition {p.partition} overlapped: {p.overlapped_records} records repeated by overlapping "
        "segments (written once)"
        for p in topic.partitions
        if p.overlapped_records
    ]
    lines += [_quarantined_line(topic.topic, r) for r in topic.quarantined]
    return "\n".join(lines)


def _quarantined_line(topic: str, r: QuarantinedRange) -> str:
    """A quarantined segment, and the offset reset that brings it back once repaired."""
    return (
        f"  partition {r.partition} quarantined: offsets {r.first_offset}..{r.last_offset} of "
        f"{r.segment_key} skipped; once repaired: kafscale-iceberg replay --config … --topic {topic} "
        f"--partition {r.partition} --from-offset {r.first_offset} --reset-offsets"
    )


def _gaps_line(p: PartitionStatus) -> str:
    """`  partition 0 offset gaps: 15 offsets no segment contained (10..19, 30..34)`."""
    shown = p.offset_gaps.ranges[:_GAPS_SHOWN]
    listed = ", ".join(f"{first}..{last}" if first != last else str(first) for first, last in shown)
    more = ", ..." if len(p.offset_gaps.ranges) > _GAPS_SHOWN else ""
    return (
        f"  partition {p.partition} offset gaps: {p.offset_gaps.missing} offsets no segment contained "
        f"({listed}{more})"
    )


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
