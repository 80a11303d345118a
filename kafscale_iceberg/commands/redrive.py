"""`kafscale-iceberg redrive --config FILE --topic T [--reason R] [--partition P]
[--from-offset A] [--to-offset B] [--dry-run] [--json]`.

After the mapping was fixed (a column type, say): the topic's dead letters converted again with the
current configuration; those that now convert land in their table exactly once and leave the dead-letter
table, those still failing stay with their new reason. `--dry-run` prints what would happen, per reason
and table, and changes nothing. Safe to run again, and to re-run after a crash. See `services/redrive.py`.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafscale_iceberg.services.redrive import RedriveReport


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`redrive`'s arguments."""
    parser.add_argument("--config", required=True, help="the config file (path, file:// or s3:// URI)")
    parser.add_argument("--topic", required=True, help="the topic whose dead letters to re-drive")
    parser.add_argument("--reason", help="only dead letters of this error_kind (e.g. required_column)")
    parser.add_argument("--partition", type=int, help="only this partition")
    parser.add_argument("--from-offset", type=int, metavar="A", help="only offsets >= A")
    parser.add_argument("--to-offset", type=int, metavar="B", help="only offsets <= B")
    parser.add_argument(
        "--dry-run", action="store_true", help="count what would land, per reason; change nothing"
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.set_defaults(command=redrive_command)


def redrive_command(args: argparse.Namespace) -> int:
    """Re-drive the topic's dead letters; prints what landed (or would). Exit code 0."""
    from kafscale_iceberg.assembly import Assembly  # noqa: PLC0415
    from kafscale_iceberg.config import load_config_from  # noqa: PLC0415
    from kafscale_iceberg.domain.redrive import RedriveSelection  # noqa: PLC0415

    selection = RedriveSelection(
        reason=args.reason, partition=args.partition, from_offset=args.from_offset, to_offset=args.to_offset
    )
    report = Assembly(load_config_from(args.config)).redrive.redrive(
        args.topic, selection, dry_run=args.dry_run
    )
    print(json.dumps(report.to_json(), indent=2) if args.json else render_redrive(report))
    return 0


def render_redrive(report: RedriveReport) -> str:
    """One block per mapping: landed, already landed, still failing (new reason), without payload."""
    verb = "would land" if report.dry_run else "landed"
    lines = [f"redrive of {report.topic}" + (" (dry run: nothing changed)" if report.dry_run else "")]
    for counts in report.mappings:
        lines.append(f"  {counts.dead_letter_table} -> {counts.table}")
        lines.append(f"    {verb:<16}{_listed(counts.landed)}")
        lines.append(f"    {'already landed':<16}{_listed(counts.already_landed)} (resolved only)")
        lines.append(f"    {'still failing':<16}{_listed(counts.still_failing)} (by new reason; kept)")
        lines.append(
            f"    {'no payload':<16}{_listed(counts.no_payload)} (kept: replay --reset-offsets re-reads them)"
        )
    return "\n".join(lines)


def _listed(counts: dict[str, int] | object) -> str:
    if not isinstance(counts, dict) or not counts:
        return "0"
    total = sum(counts.values())
    return f"{total} (" + ", ".join(f"{kind} {n}" for kind, n in counts.items()) + ")"
