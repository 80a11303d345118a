"""The in-process runner beside the warm local Spark session: peak memory and speed, same plan, same run.

Run with `python -m bench.runners` (part of `make bench-e2e`). The workload is `bench/spark.py`'s
(pizza-order JSON events, ~280 bytes per record, segments of 20,000 records, 7 columns, partitioned by
`day(event_time)`) on a local folder. Each configuration runs in its own process, which runs the same
plan once cold (imports, numba caches, Spark's session and Python workers) and then `--rounds` times
(best kept):

- `inline` (`runner.type: inline`, the Lambda runner's code): the driver with the in-process task
  executor, 1 worker thread and 2 (`runner.inline.workers`);
- `spark local[2]` (`runner.type: local`, warm session): `spark_app.job.run_job`, the same driver
  with Spark mapping the tasks.

The peak memory is the process tree's resident set (the process, and for Spark its JVM and Python
workers), sampled every 20 ms from /proc while the configuration runs. MB are segment (`.kfs`) bytes
(1e6). Also printed: how long the Lambda runner takes for a run of `runner.lambda.max_bytes` (the
default) at the measured 2-worker rate, against Lambda's 900 s. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.spark import make_workload, plan_uri
from kafscale_iceberg.config.sections import DEFAULT_LAMBDA_MAX_BYTES
from kafscale_iceberg.segments.layout import Codec

CONFIGURATIONS = ("inline-1", "inline-2", "spark-2")
LAMBDA_TIMEOUT_S = 900


def _tree_rss_bytes(root: int) -> int:
    """Resident bytes of `root` and every process below it (from /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            statm = Path(entry.path, "statm").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        rss[pid] = int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE")
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(rss.get(pid, 0) for pid in tree)


def measure(configuration: str, uri: str, rounds: int) -> dict[str, Any]:
    """Run `configuration` in a child process; its timings and the tree's peak resident bytes."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.runners",
            "--child",
            configuration,
            "--plan",
            uri,
            "--rounds",
            str(rounds),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_bytes(child.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = child.communicate()
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise RuntimeError(f"{configuration} failed (exit {child.returncode})")
    timings: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return {**timings, "peak_rss_mb": peak / 1e6}


def run_child(configuration: str, uri: str, rounds: int) -> dict[str, Any]:
    """In the child: run the plan cold, then `rounds` times; the seconds."""
    kind, workers = configuration.split("-")
    if kind == "inline":
        from kafscale_iceberg.execution.in_process import run_plan_in_process

        def run() -> None:
            result = run_plan_in_process(uri, workers=int(workers))
            assert result.failure is None, result.failure
    else:
        from spark_app.job import build_session, run_job

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        session = build_session(master=f"local[{workers}]", conf={"spark.ui.enabled": "false"})
        session.sparkContext.setLogLevel("ERROR")

        def run() -> None:
            result = run_job(session, uri)
            assert result.failure is None, result.failure

    started = time.perf_counter()
    run()
    cold = time.perf_counter() - started
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    return {"cold_s": cold, "best_s": min(seconds), "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--segments", type=int, default=4, help="segments per partition (~5.6 MB each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=CONFIGURATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args.plan, args.rounds)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-runners-") as folder:
        workload = make_workload(
            Path(folder), partitions=args.partitions, segments=args.segments, codec=Codec.NONE
        )
        uri = plan_uri(workload)
        mb = workload.megabytes
        print(
            f"workload: {mb:.1f} MB, {workload.records} records, {len(workload.plan.partitions)} partitions"
        )
        found = {name: measure(name, uri, args.rounds) for name in CONFIGURATIONS}
    print(f"{'configuration':<16}{'best s':>9}{'MB/s':>9}{'cold s':>9}{'peak RSS MB':>14}")
    for name, found_ in found.items():
        print(
            f"{name:<16}{found_['best_s']:>9.2f}{mb / found_['best_s']:>9.1f}{found_['cold_s']:>9.2f}"
            f"{found_['peak_rss_mb']:>14.0f}"
        )
    inline, spark = found["inline-2"], found["spark-2"]
    rate = mb / inline["best_s"]
    at_default_s = DEFAULT_LAMBDA_MAX_BYTES / 1e6 / rate
    summary = {
        "inline_mb_per_s_1_worker": round(mb / found["inline-1"]["best_s"], 1),
        "inline_mb_per_s_2_workers": round(rate, 1),
        "spark_local2_mb_per_s": round(mb / spark["best_s"], 1),
        "inline_vs_spark_speed": round(spark["best_s"] / inline["best_s"], 2),
        "inline_peak_rss_mb": round(inline["peak_rss_mb"]),
        "spark_peak_rss_mb": round(spark["peak_rss_mb"]),
        "inline_vs_spark_memory": round(inline["peak_rss_mb"] / spark["peak_rss_mb"], 2),
        "lambda_max_bytes_default_s": round(at_default_s, 1),
        "lambda_timeout_s": LAMBDA_TIMEOUT_S,
    }
    print(
        f"inline (2 workers) vs warm Spark local[2]: {summary['inline_vs_spark_speed']}x the speed, "
        f"{summary['inline_vs_spark_memory']}x the peak memory; a run of runner.lambda.max_bytes "
        f"({DEFAULT_LAMBDA_MAX_BYTES / 2**20:.0f} MiB) takes ~{at_default_s:.0f} s at 2 workers "
        f"(Lambda: {LAMBDA_TIMEOUT_S} s)"
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
