"""Segment decode throughput per core: ours vs kafka-python vs a CRC-32C floor, on the same bytes.

Run with `python -m bench.codec` (or `make bench-codec`). Workload: synthetic pizza-order JSON events
(~220 bytes) in KafScale segments of 20,000 records, batches of 100 and 1000 records, uncompressed and
per codec. Each figure is the best of several repeats of CPU time of this process (`time.process_time`,
single thread), so other load on the machine affects it little.

- ours: `decode_segment` (batch and body CRC-32C verified) into the Arrow table.
- peer: kafka-python's pure-Python `MemoryRecords` / `DefaultRecordBatch` on the segment bodies, with
  `validate_crc()` per batch and every record field read (the same work).
- floor: CRC-32C over the same `.kfs` bytes (reading the bytes once, at memory speed).

Also measured, in subprocesses: the same decoder with numba disabled (`NUMBA_DISABLE_JIT=1`, the
record walker as plain Python) and numba's compile and cache-load times. The last line of output is
one JSON object with the uncompressed figures for 100-record batches.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from kafscale_iceberg.segments.crc import crc32c
from kafscale_iceberg.segments.decode import decode_segment
from kafscale_iceberg.segments.generate import generate_segments
from kafscale_iceberg.segments.layout import FOOTER_SIZE, HEADER_SIZE, Codec

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas with deprecated importlib.resources calls.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

RECORDS_PER_SEGMENT = 20_000
BATCH_SIZES = (100, 1000)
HEADLINE_BATCH_SIZE = 100


@dataclass(frozen=True)
class Workload:
    """Segments of one codec and batch size, and what they hold."""

    codec: Codec
    records_per_batch: int
    segments: list[bytes]
    records: int
    payload_bytes: int

    @property
    def kfs_bytes(self) -> int:
        return sum(len(s) for s in self.segments)


@dataclass(frozen=True)
class Row:
    """Measured throughputs for one workload (records/s and MB/s of decoded record bytes)."""

    workload: Workload
    ours_s: float
    peer_s: float
    crc_s: float

    @property
    def ours_records_per_s(self) -> float:
        return self.workload.records / self.ours_s

    @property
    def ours_mb_per_s(self) -> float:
        return self.workload.payload_bytes / self.ours_s / 1e6

    @property
    def peer_records_per_s(self) -> float:
        return self.workload.records / self.peer_s

    @property
    def vs_peer(self) -> float:
        return self.peer_s / self.ours_s

    @property
    def vs_crc_floor(self) -> float:
        return self.crc_s / self.ours_s


def build_workload(codec: Codec, records_per_batch: int, segments: int) -> Workload:
    """`segments` segments of `RECORDS_PER_SEGMENT` pizza orders, every batch compressed with `codec`."""
    kfs = [
        g.files.kfs
        for g in generate_segments(
            segments=segments,
            batches_per_segment=RECORDS_PER_SEGMENT // records_per_batch,
            records_per_batch=records_per_batch,
            codec=codec,
            seed=7,
        )
    ]
    decoded = [decode_segment(s, source="bench") for s in kfs]
    return Workload(
        codec=codec,
        records_per_batch=records_per_batch,
        segments=kfs,
        records=sum(d.record_count for d in decoded),
        payload_bytes=sum(d.payload_bytes for d in decoded),
    )


def cpu_seconds(run: Callable[[], object]) -> float:
    """CPU time of this process spent in one call of `run`."""
    start = time.process_time()
    run()
    return time.process_time() - start


def decode_ours(workload: Workload) -> None:
    for segment in workload.segments:
        decode_segment(segment, source="bench")


def decode_peer(workload: Workload) -> None:
    for segment in workload.segments:
        records = MemoryRecords(segment[HEADER_SIZE:-FOOTER_SIZE])
        while (batch := records.next_batch()) is not None:
            if not batch.validate_crc():
                raise AssertionError("kafka-python rejected a batch CRC")
            for record in batch:
                _ = (record.offset, record.timestamp, record.key, record.value, record.headers)


def crc_floor(workload: Workload) -> None:
    for segment in workload.segments:
        crc32c(segment)


def measure(workload: Workload, repeats: int) -> Row:
    """The best of `repeats` CPU times of ours, the peer and the floor.

    The three are interleaved, so that drift in machine load hits all of them alike.
    """
    decode_ours(workload)  # warm: numba cache load, Arrow kernels, allocator
    ours, peer, crc = [], [], []
    for _ in range(repeats):
        ours.append(cpu_seconds(lambda: decode_ours(workload)))
        peer.append(cpu_seconds(lambda: decode_peer(workload)))
        crc.append(cpu_seconds(lambda: crc_floor(workload)))
    return Row(workload=workload, ours_s=min(ours), peer_s=min(peer), crc_s=min(crc))


_SUBPROCESS_DECODE = """
import time
t0 = time.process_time()
from kafscale_iceberg.segments.decode import decode_segment
from kafscale_iceberg.segments.generate import generate_segments
(segment,) = generate_segments(batches_per_segment=20, records_per_batch=100, seed=7)
t1 = time.process_time()
first = decode_segment(segment.files.kfs, source="bench")
t2 = time.process_time()
decode_segment(segment.files.kfs, source="bench")
t3 = time.process_time()
print(first.record_count, t1 - t0, t2 - t1, t3 - t2)
"""


def run_decode_subprocess(env: dict[str, str]) -> tuple[int, float, float, float]:
    """(records, import + generate, first decode, second decode) CPU seconds in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS_DECODE],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    records, setup, first, second = result.stdout.split()
    return int(records), float(setup), float(first), float(second)


def main() -> None:
    """Measure, print the table and notes, and end with the headline JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=5, help="segments per workload (20,000 records each)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    rows = []
    for records_per_batch in BATCH_SIZES:
        for codec in Codec:
            rows.append(measure(build_workload(codec, records_per_batch, args.segments), args.repeats))

    header = (
        f"{'codec':<7}{'rec/batch':>10}{'records':>9}{'kfs MB':>8}{'ours rec/s':>13}{'ours MB/s':>11}"
        f"{'peer rec/s':>12}{'vs peer':>9}{'CRC MB/s':>10}{'vs CRC':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        w = row.workload
        print(
            f"{w.codec.name.lower():<7}{w.records_per_batch:>10}{w.records:>9}{w.kfs_bytes / 1e6:>8.1f}"
            f"{row.ours_records_per_s:>13,.0f}{row.ours_mb_per_s:>11.0f}{row.peer_records_per_s:>12,.0f}"
            f"{row.vs_peer:>8.1f}x{w.kfs_bytes / row.crc_s / 1e6:>10.0f}{row.vs_crc_floor:>8.3f}"
        )
    print()
    print("MB/s = decoded (uncompressed) record bytes per CPU second; CRC MB/s = .kfs bytes per CPU second.")

    records, _, jit_off_first, jit_off_second = run_decode_subprocess({"NUMBA_DISABLE_JIT": "1"})
    plain = records / min(jit_off_first, jit_off_second)
    print(f"numba disabled (the same record walker as plain Python): {plain:,.0f} records/s")
    with tempfile.TemporaryDirectory() as cache:
        _, _, cold, warm = run_decode_subprocess({"NUMBA_CACHE_DIR": cache})
        _, setup, cached, _ = run_decode_subprocess({"NUMBA_CACHE_DIR": cache})
    print(
        f"numba: first decode with an empty cache {cold:.1f} s (compile), "
        f"with the cache {cached:.2f} s (load), then {warm * 1000:.1f} ms for {records:,} records; "
        f"imports + generation {setup:.1f} s"
    )

    headline = next(
        r
        for r in rows
        if r.workload.codec is Codec.NONE and r.workload.records_per_batch == HEADLINE_BATCH_SIZE
    )
    print(
        json.dumps(
            {
                "records_per_s_per_core": round(headline.ours_records_per_s),
                "mb_per_s_per_core": round(headline.ours_mb_per_s, 1),
                "vs_peer": round(headline.vs_peer, 1),
                "vs_crc_floor": round(headline.vs_crc_floor, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
