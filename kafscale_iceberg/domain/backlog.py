"""Whether a topic falls behind its traffic, from what `status` already reads (issue 33).

A run takes at most `run_bytes` (the launcher's cap: `runs.max_bytes_per_run`, on EMR Serverless no
more than the application's vCPU carries, `domain/run_sizing.py`). A topic whose complete pending
segments hold more than that cannot commit them in its next run: it is behind, and it stays behind
while bytes keep arriving faster than its runs take them. How fast they arrive is read off the
pending segments themselves: everything after the committed offsets arrived since the oldest of them
was written (its S3 LastModified), so the pending bytes over that span are the arrival rate. The
fix is bigger runs (`runs.max_bytes_per_run`) or a bigger application (`EmrMaximumCpu`).

On AWS the same condition raises `FallingBehindAlarm` (template.yaml): the committed watermark's
age, one of the three per-topic metrics, stays above `FallingBehindAlarmSeconds` across three
5-minute periods.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MB = 1_000_000


@dataclass(frozen=True)
class Backlog:
    """A topic's pending bytes against what one run takes."""

    pending_bytes: int
    run_bytes: int
    arriving_bytes_per_min: float | None
    """Bytes a minute written since the oldest pending segment (None: nothing pending)."""

    @property
    def falling_behind(self) -> bool:
        return self.pending_bytes > self.run_bytes

    def message(self) -> str:
        """The operator's line: how far behind, how fast it arrives, what to raise."""
        arriving = (
            f", arriving {self.arriving_bytes_per_min / MB:,.0f} MB/min"
            if self.arriving_bytes_per_min is not None
            else ""
        )
        if not self.falling_behind:
            return f"keeping up: {self.pending_bytes / MB:,.1f} MB pending{arriving}"
        return (
            f"falling behind: {self.pending_bytes / MB:,.0f} MB pending, more than one run takes "
            f"({self.run_bytes / MB:,.0f} MB){arriving}; raise runs.max_bytes_per_run or EmrMaximumCpu"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "falling_behind": self.falling_behind,
            "pending_bytes": self.pending_bytes,
            "run_bytes": self.run_bytes,
            "arriving_bytes_per_min": (
                None if self.arriving_bytes_per_min is None else round(self.arriving_bytes_per_min)
            ),
            "message": self.message(),
        }


def backlog(pending: Iterable[tuple[int, int]], run_bytes: int, *, now_ms: int) -> Backlog:
    """The backlog of pending segments given as `(size_bytes, last_modified_ms)` pairs."""
    segments = list(pending)
    total = sum(size for size, _ in segments)
    if not segments:
        return Backlog(0, run_bytes, None)
    minutes = max(now_ms - min(ms for _, ms in segments), 1_000) / 60_000
    return Backlog(total, run_bytes, total / minutes)
