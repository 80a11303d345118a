"""`kafscale-iceberg replay --config FILE --topic T [--partition P ...] [--from-offset N] [--reset-offsets]`.

Re-enqueues the topic's segments through the normal path (a committed range is a no-op, and the
output says so). `--reset-offsets` deletes the range's rows and rewinds the committed offsets first,
so the range is ingested again, once: the command prints what it will delete and re-ingest, and
asks for the topic name on a terminal; elsewhere it needs `--yes`. See `services/replay.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from kafscale_iceberg.exceptions import ReplayNotConfirmedError

if TYPE_CHECKING:
    from kafscale_iceberg.services.replay import PartitionReplay, ReplayOutcome, ReplayPlan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`replay`'s arguments."""
    parser.add_argument("--config", required=True, help="the config file")
    parser.add_argument("--topic", required=True, help="the topic to replay (a mapped topic)")
    parser.add_argument(
        "--partition",
        dest="partitions",
        type=int,
        action="append",
        metavar="P",
        help="only this partition (repeat for several; default: every partition)",
    )
    parser.add_argument(
        "--from-offset",
        type=int,
        metavar="N",
        help="replay the records at and after offset N (default: from the start)",
    )
    parser.add_argument(
        "--reset-offsets",
        action="store_true",
        help="rebuild the range: delete its rows from the table and dead-letter table, rewind the "
        "committed offsets to N-1, then re-enqueue (asks for confirmation)",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation of --reset-offsets")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.add_argument(
        "--strict-config",
        action="store_true",
        help="fail at start on an unknown (e.g. misspelled) config key instead of warning",
    )
    parser.set_defaults(command=replay_command)


def replay_command(args: argparse.Namespace) -> int:
    """Replay (after confirmation, reset) the topic's range; prints the outcome. Exit code 0."""
    from kafscale_iceberg.assembly import Assembly  # noqa: PLC0415
    from kafscale_iceberg.config import load_config_from  # noqa: PLC0415
    from kafscale_iceberg.domain.replay import ReplayRequest  # noqa: PLC0415
    from kafscale_iceberg.local.preflight import check_before_start  # noqa: PLC0415

    request = ReplayRequest.parse(
        {
            "topic": args.topic,
            "partitions": args.partitions,
            "from_offset": args.from_offset,
            "reset_offsets": args.reset_offsets,
        },
        source="replay",
    )
    config = load_config_from(args.config, strict=args.strict_config)
    check_before_start(config, command="replay")
    service = Assembly(config).replay
    if request.reset_offsets:
        preview = service.plan(request)
        # The preview goes to stderr with --json, so stdout stays one JSON document.
        print_reset_preview(preview, sys.stderr if args.json else sys.stdout)
        if preview.reset_offsets:  # else nothing would be deleted or rewound: nothing to confirm
            confirm_reset(preview, assume_yes=args.yes)
    outcome = service.replay(request)
    if args.json:
        print(json.dumps(outcome.to_json(), indent=2))
    else:
        print_outcome(outcome, sys.stdout)
    return 0


def confirm_reset(plan: ReplayPlan, *, assume_yes: bool, stdin: TextIO | None = None) -> None:
    """Ask for the topic name on a terminal; raise `ReplayNotConfirmedError` unless it is typed (or --yes)."""
    if assume_yes:
        return
    source = stdin or sys.stdin
    if not source.isatty():
        raise ReplayNotConfirmedError(
            f"--reset-offsets deletes rows from {', '.join(plan.tables)}: stdin is not a "
            "terminal, so it cannot be confirmed interactively; pass --yes to confirm (nothing was changed)"
        )
    print(
        f"Type the topic name ({plan.topic}) to delete these rows and re-ingest: ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    answer = source.readline().strip()
    if answer != plan.topic:
        raise ReplayNotConfirmedError(
            f"not confirmed (typed {answer!r}, expected {plan.topic!r}): nothing was changed"
        )


def print_reset_preview(plan: ReplayPlan, out: TextIO) -> None:
    """What a reset will delete, rewind and re-enqueue (row counts from a scan now)."""
    print(f"replay --reset-offsets of topic {plan.topic!r} will:", file=out)
    for deletion in plan.deletions:
        ranges = ", ".join(
            f"partition {p} offsets > {o}" + _through(plan, p) for p, o in sorted(deletion.after.items())
        )
        rows = "table does not exist" if deletion.rows is None else f"about {_count(deletion.rows, 'row')}"
        print(f"  delete from {deletion.table}: {ranges} ({rows})", file=out)
    rewound = ", ".join(
        f"partition {p.partition} {p.committed} -> {p.reset_to}" for p in plan.partitions if p.rewound
    )
    kept = ", ".join(
        f"partition {p.partition} stays at {p.committed}" for p in plan.partitions if not p.rewound
    )
    print(f"  rewind the committed offsets: {rewound or 'none'}" + (f" ({kept})" if kept else ""), file=out)
    for p in plan.partitions:
        print(f"  re-enqueue {_segments_line(p)}", file=out)


def print_outcome(outcome: ReplayOutcome, out: TextIO) -> None:
    """Per partition what was enqueued, then the one-sentence summary."""
    for p in outcome.plan.partitions:
        committed = f"committed {p.committed} -> {p.reset_to}" if p.rewound else f"committed {p.committed}"
        print(f"  {_segments_line(p)}; {committed}", file=out)
    print(outcome.summary(), file=out)


def _through(plan: ReplayPlan, partition: int) -> str:
    committed = next(p.committed for p in plan.partitions if p.partition == partition)
    return f" (through {committed})" if committed > plan.reset_offsets[partition] else ""


def _segments_line(p: PartitionReplay) -> str:
    data = p.to_json()
    count = data["segments"]
    where = f"offsets {data['first_offset']}-{data['last_offset']}" if count else "no complete segment"
    skipped = f", {len(p.incomplete)} incomplete skipped" if p.incomplete else ""
    return f"partition {p.partition}: {_count(count, 'segment')}, {where}{skipped}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
