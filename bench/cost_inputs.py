"""The cost model's throughput input: `make cost-throughput` writes it (cost/measured/throughput.json).

The same segments (bench/spark.py's workload: synthetic JSON order events, 7 columns, partitioned by
day) processed, in child processes pinned with `os.sched_setaffinity`, by
- the Lambda runner's task code in-process (`dataplane.tasks.run_task` over the plan's tasks, one
  thread per usable core, as the in-process runner runs them), pinned to one core and to two;
- a Spark task: `spark_app.job.run_job` on a `local[1]` session, pinned to one core (one task slot:
  the JVM and the Python worker share that core, as they share an EMR executor's vCPU);
sampled interleaved over rounds (best of each), in the same run. Session start and the first
(cold) run are excluded from both. The file records when, on what machine and at what load average:
measure on a quiet machine (docs/cost.md). The request counts are the AWS box's
(`make cost-box-counts`: tests/test_aws_requests.py with `KAFSCALE_BOX_COUNTS`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def record_throughput(destination: Path) -> dict[str, object]:
    """Measure (bench/spark.py's workload) and write the throughput document the cost model reads."""
    import tempfile

    from bench.spark import make_workload, plan_uri
    from kafscale_iceberg.segments.layout import Codec

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="cost-throughput-") as tmp:
        workload = make_workload(Path(tmp), partitions=2, segments=3, codec=Codec.NONE)
        speeds = throughput(Path(plan_uri(workload)), workload.megabytes)
    loads.append(os.getloadavg()[0])
    ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    document: dict[str, object] = {
        "measured_at": f"{started}/{ended}",
        "machine": f"{os.cpu_count()} vCPUs ({_cpu_model()}), Python {sys.version.split()[0]}",
        "load_average_1min": [round(x, 2) for x in loads],
        "load_note": "",
        "command": "make cost-throughput (bench/cost_inputs.py)",
        "workload": f"bench/spark.py's workload: {workload.megabytes:.2f} MB, {workload.records:,} records",
        "mb_per_s": {
            "lambda_runner_1_vcpu": round(speeds["lambda_1_core"], 2),
            "lambda_runner_2_vcpu": round(speeds.get("lambda_2_cores", speeds["lambda_1_core"]), 2),
            "spark_task_1_vcpu": round(speeds["spark_task"], 2),
        },
    }
    destination.write_text(json.dumps(document, indent=1) + "\n")
    return document


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        print(json.dumps(record_throughput(Path(sys.argv[2]))))
    else:
        plan_arg, kind_arg, cores_arg, repeats_arg = sys.argv[1:5]
        times = _measure_child(plan_arg, kind_arg, [int(c) for c in cores_arg.split(",")], int(repeats_arg))
        print(json.dumps(times))
