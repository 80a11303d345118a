"""`kafscale-iceberg ...`: the command-line entry point."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    del argv
    print("kafscale-iceberg: no commands yet", file=sys.stderr)
    return 2
