"""`kafscale-iceberg demo`: the whole product on embedded services, with checks (see `local/demo.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`demo`'s arguments."""
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the demo's catalog, warehouse and config here (default: a temp dir)",
    )
    parser.add_argument("--rounds", type=int, default=8, help="rounds of segment flushes (default: 8)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between rounds (default: 2)")
    parser.set_defaults(command=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    """Run the demo; 0 only when every check holds."""
    from kafscale_iceberg.local.demo import run_demo  # noqa: PLC0415

    return run_demo(args.workdir, rounds=args.rounds, interval_s=args.interval)
