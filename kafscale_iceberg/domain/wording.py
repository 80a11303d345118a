"""Counts in the words a person reads: "1 run", "2 runs", never "1 runs"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str = "") -> str:
    """`count` and `noun`, singular for exactly one (`plural` when the noun does not take an `s`)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
