"""`kafscale-iceberg run --config FILE [--once]`: the pipeline in this process.

A drop-in for KafScale's Go processor: the same config file, continuous ingestion until SIGINT or
SIGTERM (the run in flight is cancelled and aborted: lease released, nothing half-committed), or
`--once` to commit everything pending now and exit (0 when all of it committed, 1 with a summary).
A continuous run rides out its dependencies' outages (`/healthz` not ready meanwhile); any other
error ends it with exit code 1 (a defect with its traceback), never left up and not ready forever.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from kafscale_iceberg.exceptions import KafscaleIcebergError

if TYPE_CHECKING:
    from kafscale_iceberg.local.pipeline import OnceSummary
    from kafscale_iceberg.local.run_reports import RunReport


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`run`'s arguments."""
    parser.add_argument("--config", required=True, help="the config file (the Go processor's, plus ours)")
    parser.add_argument(
        "--once",
        action="store_true",
        help="commit everything pending now, then exit (non-zero if any failed)",
    )
    parser.add_argument(
        "--strict-config",
        action="store_true",
        help="fail at start on an unknown (e.g. misspelled) config key instead of warning",
    )
    parser.set_defaults(command=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Run the pipeline; the exit code of `--once`, or 0 after a clean shutdown."""
    # Imported here, not at the top: `kafscale-iceberg <other command>` never loads the pipeline.
    from kafscale_iceberg.config import load_config_from  # noqa: PLC0415
    from kafscale_iceberg.local.preflight import check_before_start  # noqa: PLC0415
    from kafscale_iceberg.local.wiring import ProgressPrinter, open_pipeline  # noqa: PLC0415
    from kafscale_iceberg.metrics import MetricsServer, PrometheusMetricsSink  # noqa: PLC0415

    config = load_config_from(args.config, strict=args.strict_config)
    sink = PrometheusMetricsSink()
    server = MetricsServer.from_environment(sink)
    server.start()  # a metrics port already taken fails here, first, naming KAFSCALE_METRICS_ADDR
    try:
        check_before_start(config, command="run")  # before any JVM: each mistake in seconds
    except BaseException:
        server.stop()
        raise
    printer = ProgressPrinter(config=config)
    where = server.where
    print(f"kafscale-iceberg run: metrics on {where}/metrics, health on {where}/healthz", file=sys.stderr)
    with (
        server,
        open_pipeline(config, observers=[printer], metrics=sink, warm_up=not args.once) as pipeline,
        stop_on_signals(pipeline.stop),
    ):
        pipeline.health = server.readiness
        if args.once:
            summary = pipeline.run_once()
            print_summary(summary, refer=printer.refer)
            return 0 if summary.ok else 1
        print(
            f"kafscale-iceberg run: ingesting {', '.join(config.mapped_topics)}; Ctrl-C stops",
            file=sys.stderr,
        )
        try:
            pipeline.run_forever()
        except KafscaleIcebergError:
            raise  # a terminal error of ours: one line naming what to do, exit 1
        except Exception:
            # A defect, not an outage: its traceback was logged; exit rather than stay up not-ready.
            print("kafscale-iceberg run: stopped by an unexpected error (traceback above)", file=sys.stderr)
            return 1
    print("kafscale-iceberg run: stopped cleanly", file=sys.stderr)
    return 0


@contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT/SIGTERM ask the pipeline to stop at its next step; a second one exits at once."""
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) > 1:
            raise KeyboardInterrupt
        print(
            f"\nkafscale-iceberg: {signal.Signals(signum).name}: stopping after the current step",
            file=sys.stderr,
        )
        stop()

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def print_summary(summary: OnceSummary, refer: Callable[[str], str] = lambda text: text) -> None:
    """The `--once` summary: runs, records, and each topic left behind with why (an error the progress
    lines printed already is referred to, not repeated: `refer`)."""
    from kafscale_iceberg.domain.wording import counted  # noqa: PLC0415
    from kafscale_iceberg.local.run_reports import RunEnd  # noqa: PLC0415
    from kafscale_iceberg.local.wiring import lfs_summary  # noqa: PLC0415

    ended = [r for r in summary.runs if r.end is RunEnd.COMMITTED]
    committed = [r for r in ended if not r.committed_elsewhere]
    finished = summary.finished
    records = sum(r.records for r in committed) + sum(f.records for f in finished)
    recovered = f" ({len(finished)} of them left by an earlier crash and finished)" if finished else ""
    elsewhere = len(ended) - len(committed)
    others = f", {counted(elsewhere, 'run')} already committed by another runner" if elsewhere else ""
    print(
        f"kafscale-iceberg run --once: {counted(len(committed) + len(finished), 'run')} committed"
        f"{recovered}, {counted(records, 'record')}{others}, {counted(len(summary.failed), 'topic')} failed",
        file=sys.stderr,
    )
    for run in finished:
        print(f"  {run.topic}: finished {run.describe()}", file=sys.stderr)
    dead = sum(r.dead_lettered for r in committed)
    skipped = sum(r.skipped_lfs for r in committed)
    lfs_errors: dict[str, int] = {}
    for report in committed:
        for reason, count in report.lfs_errors.items():
            lfs_errors[reason] = lfs_errors.get(reason, 0) + count
    if dead or skipped or lfs_errors:
        resolved = sum(r.lfs_resolved for r in committed)
        print(f"  {dead} records dead-lettered{lfs_summary(resolved, skipped, lfs_errors)}", file=sys.stderr)
    for topic, columns in sorted(conversion_failures(committed).items()):
        listed = ", ".join(f"{column} {count}" for column, count in sorted(columns.items()))
        print(
            f"  {topic}: values that did not convert to their column's type, stored null "
            f"(the value column keeps them): {listed}",
            file=sys.stderr,
        )
    for topic, reason in sorted(summary.blocked.items()):
        print(f"  {topic}: not complete yet (left for the next run): {refer(reason)}", file=sys.stderr)
    for topic, reason in sorted(summary.failed.items()):
        print(f"  {topic}: FAILED: {refer(reason)}", file=sys.stderr)
    for what in dict.fromkeys(summary.unavailable):
        if refer(what) == what and not any(what in reason for reason in summary.failed.values()):
            print(f"  unavailable: {what}", file=sys.stderr)


def conversion_failures(runs: Sequence[RunReport]) -> dict[str, dict[str, int]]:
    """Per topic and column, the conversion failures of the committed runs in `runs`."""
    totals: dict[str, dict[str, int]] = {}
    for run in runs:
        if run.commit is None:
            continue
        for column, count in run.commit.result.counts.conversion_failures.items():
            columns = totals.setdefault(run.topic, {})
            columns[column] = columns.get(column, 0) + count
    return totals
