"""The measured inputs of `make bench-cost`: the runners' throughput here, the AWS box's counts.

Throughput: the same segments (bench/spark.py's workload: synthetic JSON order events, 7 columns,
partitioned by day) processed, in child processes pinned with `os.sched_setaffinity`, by
- the Lambda runner's task code in-process (`dataplane.tasks.run_task` over the plan's tasks, one
  thread per usable core, as the in-process runner runs them), pinned to one core and to two;
- a Spark task: `spark_app.job.run_job` on a `local[1]` session, pinned to one core (one task slot:
  the JVM and the Python worker share that core, as they share an EMR executor's vCPU);
sampled interleaved over rounds (best of each), in the same run. Session start and the first
(cold) run are excluded from both.

Counts: `tests/test_aws_requests.py` run in the AWS box (`KAFSCALE_BOX_COUNTS` names the JSON file
it writes): requests per run and per segment by service (S3 GETs also by role), and what one lease
renewal costs (the model counts renewals from a run's time: the box's count is its machine's load).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.cost_model import Line

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BoxCounts:
    """What the box's execution gave: each count per run and per segment, what one lease renewal
    costs (empty when no run renewed), each function's seconds per run on this machine."""

    lines: dict[str, Line]
    renewal: dict[str, float]
    seconds: dict[str, float]


def box_counts(path: Path) -> BoxCounts:
    """Run the AWS-box test that counts the path's requests (unless `path` exists) and read it."""
    if not path.exists():
        env = {**os.environ, "KAFSCALE_BOX_COUNTS": str(path)}
        command = [
            sys.executable,
            "-m",
            "pytest",
            "tests/test_aws_requests.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        print("counting requests in the AWS box:", " ".join(command[2:]), flush=True)
        subprocess.run(command, cwd=ROOT, env=env, check=True)
    document = json.loads(path.read_text())
    runs = document["runs"]
    functions = {f for run in runs for f in run.get("seconds", {})}
    return BoxCounts(
        lines={name: Line(**line) for name, line in document["lines"].items()},
        renewal=document.get("renewal", {}),
        seconds={f: sum(run.get("seconds", {}).get(f, 0.0) for run in runs) / len(runs) for f in functions},
    )


def _measure_child(plan_path: str, kind: str, cores: list[int], repeats: int) -> list[float]:
    """In the child: pin, warm up, then `repeats` timed runs; their seconds."""
    os.sched_setaffinity(0, cores)
    from bench.workload import Workload, clear_output
    from kafscale_iceberg.domain.runs import RunPlan

    plan = RunPlan.model_validate_json(Path(plan_path).read_text())
    workload = Workload(root=Path(plan_path).parents[4], plan=plan, records=0)
    if kind == "spark":
        from spark_app.job import build_session, run_job

        spark = build_session(
            master="local[1]",
            app_name="bench-cost",
            conf={"spark.ui.enabled": "false", "spark.default.parallelism": "1"},
        )
        spark.sparkContext.setLogLevel("ERROR")

        def run() -> None:
            result = run_job(spark, plan_path)
            assert result.status.value == "succeeded", result.failure
    else:
        from kafscale_iceberg.adapters.data_files import StagedFileStore
        from kafscale_iceberg.adapters.documents import DocumentStore
        from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task

        tasks = plan_tasks(plan, max_tasks=2 * len(cores), min_task_bytes=1, multiple_of=len(cores))

        def run() -> None:
            def one(task: object) -> None:
                report = run_task(plan, task, reader=DocumentStore(None), sink=StagedFileStore())  # type: ignore[arg-type]
                assert report.failure is None, report.failure

            with ThreadPoolExecutor(max_workers=len(cores)) as pool:
                list(pool.map(one, tasks))

    clear_output(workload)
    run()  # cold: imports, numba caches, Python workers
    seconds = []
    for _ in range(repeats):
        clear_output(workload)
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    return seconds


def throughput(plan_path: Path, megabytes: float, *, rounds: int = 2, repeats: int = 2) -> dict[str, float]:
    """MB/s of each configuration (best run), sampled interleaved over `rounds` child processes each."""
    configurations = {
        "lambda_1_core": ("inprocess", [0]),
        "lambda_2_cores": ("inprocess", [0, 1]),
        "spark_task": ("spark", [0]),
    }
    best: dict[str, float] = {}
    for number in range(rounds):
        for name, (kind, cores) in configurations.items():
            if max(cores) >= (os.cpu_count() or 1):
                continue
            output = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.cost_inputs",
                    str(plan_path),
                    kind,
                    ",".join(map(str, cores)),
                    str(repeats),
                ],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            seconds = min(json.loads(output.strip().splitlines()[-1]))
            best[name] = min(best.get(name, seconds), seconds)
        print(
            f"  round {number + 1}: " + ", ".join(f"{n} {megabytes / s:.1f} MB/s" for n, s in best.items()),
            flush=True,
        )
    return {name: megabytes / seconds for name, seconds in best.items()}


if __name__ == "__main__":
    plan_arg, kind_arg, cores_arg, repeats_arg = sys.argv[1:5]
    times = _measure_child(plan_arg, kind_arg, [int(c) for c in cores_arg.split(",")], int(repeats_arg))
    print(json.dumps(times))
