"""`kafscale-iceberg maintain --config FILE [--topic T ...] [--dry-run] [--compact] [--json]`.

One maintenance pass over the mapped tables and their dead-letter tables: compaction (when a table
has `maintenance.compaction_min_small_files` small files, or always with `--compact`), snapshot
expiry and orphan-file cleanup (`services/maintenance.py`). `--dry-run` reads only and lists what
would be compacted, expired and deleted.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafscale_iceberg.services.maintenance import MaintenanceReport


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`maintain`'s arguments."""
    parser.add_argument("--config", required=True, help="the config file (path, file:// or s3:// URI)")
    parser.add_argument("--topic", action="append", default=[], help="only this topic's tables (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="change nothing; list what would be done")
    parser.add_argument(
        "--compact",
        action="store_true",
        help="compact whatever the small-file count (default: at the threshold)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document")
    parser.add_argument(
        "--strict-config",
        action="store_true",
        help="fail at start on an unknown (e.g. misspelled) config key instead of warning",
    )
    parser.set_defaults(command=maintain_command)


def maintain_command(args: argparse.Namespace) -> int:
    """Maintain the tables once; 0 when done (errors end the command with 1)."""
    from kafscale_iceberg.assembly import Assembly  # noqa: PLC0415
    from kafscale_iceberg.config import load_config_from  # noqa: PLC0415
    from kafscale_iceberg.local.preflight import check_before_start  # noqa: PLC0415

    config = load_config_from(args.config, strict=args.strict_config)
    check_before_start(config, command="maintain", reads_segments=False)
    assembly = Assembly(config)
    if config.maintenance.compaction_engine == "spark" and config.runner.type == "local" and not args.dry_run:
        # One machine: the compaction job runs on local Spark, as `run`'s runs do.
        from kafscale_iceberg.local.wiring import maintenance_service, make_runner  # noqa: PLC0415

        runner = make_runner(assembly)
        try:
            report = maintenance_service(assembly, runner).maintain(
                topics=args.topic, dry_run=args.dry_run, force_compaction=args.compact
            )
        finally:
            close = getattr(runner, "close", None)
            if close is not None:
                close()
    else:
        report = assembly.maintenance.maintain(
            topics=args.topic, dry_run=args.dry_run, force_compaction=args.compact
        )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_report(report))
    return 0


def render_report(report: MaintenanceReport) -> str:
    """The report as text, one block per table."""
    verb = "would" if report.dry_run else "did"
    if not report.tables:
        return "no tables to maintain (none of the mapped tables exists yet)"
    blocks = []
    for done in report.tables:
        before = done.before
        lines = [
            f"{done.table}: {before.files} files ({before.small_files} small), {before.snapshots} snapshots",
        ]
        if before.managed_compaction:
            lines.append("  compaction    left to Amazon S3 Tables (it compacts the table)")
        elif report.dry_run:
            lines.append(f"  compaction    would rewrite {done.compaction_candidates} files")
        elif done.compaction is not None:
            c = done.compaction
            state = "committed" if c.committed else "not committed (left for the next pass)"
            lines.append(f"  compaction    {c.files_removed} files -> {c.files_added}, {state}")
        else:
            lines.append("  compaction    not needed")
        expired = len(done.expiry.expired) if done.expiry else 0
        lines.append(f"  expiry        {verb} expire {expired} snapshots")
        if done.orphans_deferred:
            lines.append("  orphan files  left to Amazon S3 Tables (its unreferenced-file removal)")
        else:
            lines.append(f"  orphan files  {verb} delete {len(done.orphans)}")
        lines += [f"    {o.uri}" for o in done.orphans[:50]]
        if len(done.orphans) > 50:
            lines.append(f"    … and {len(done.orphans) - 50} more")
        if done.after is not None:
            after = done.after
            now = f"{after.files} files ({after.small_files} small), {after.snapshots} snapshots"
            lines.append(f"  now           {now}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
