"""The in-process task executor: a run's tasks in this process, no JVM (the Lambda runner and
`runner.type: inline`).

The tasks are the Spark job's (`execution/driver.TaskRunner`); here they run on a small thread pool,
one thread per core this process may use (`os.sched_getaffinity`: a process pinned to one core runs
its tasks one at a time). Threads, not processes: the task code spends its time in pyarrow, the
compiled record walker and S3 I/O, which release the GIL, and a Lambda function has no `/dev/shm`
for a process pool's queues.

A cancel (`cancel()`) lets the tasks already running finish and starts no other; the run then fails
with `CancelledError` (the driver writes that failed result), as a Spark job group's cancel does.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_EXCEPTION, CancelledError, Future, ThreadPoolExecutor, wait

from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.runs import RunResult
from kafscale_iceberg.execution.driver import TaskSizing, run_plan
from kafscale_iceberg.ports import TaskWork

LAMBDA_MB_PER_VCPU = 1769
"""Lambda gives a function one vCPU's share per 1,769 MB of `MemorySize`, whatever cores it shows."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one, else all); in a
    Lambda function at most its memory's vCPU share (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`): a 1,769 MB
    function shows two cores but runs one's worth, and two task threads would contend on it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS: no affinity
        cores = os.cpu_count() or 1
    memory_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "")
    if memory_mb.isdigit():
        cores = min(cores, -(-int(memory_mb) // LAMBDA_MB_PER_VCPU))
    return max(1, cores)


class InProcessTaskExecutor:
    """Maps a run's tasks on `workers` threads of this process (default: `usable_cores()`)."""

    def __init__(self, workers: int | None = None, *, name: str = "kafscale-task") -> None:
        self._workers = workers or usable_cores()
        self._name = name
        self._cancelled = threading.Event()

    @property
    def parallelism(self) -> int:
        """How many tasks run at once."""
        return self._workers

    def cancel(self) -> None:
        """Start no further task; the run fails with `CancelledError`. Idempotent."""
        self._cancelled.set()

    def map_tasks(self, work: TaskWork, count: int) -> list[str]:
        """Every task's document; raises the first task's error (`CancelledError` after a cancel)."""
        if self._workers == 1 or count <= 1:
            documents: list[str] = []
            for index in range(count):
                documents += self._one(work, index)
            return documents
        with ThreadPoolExecutor(max_workers=min(self._workers, count), thread_name_prefix=self._name) as pool:
            futures = [pool.submit(self._one, work, index) for index in range(count)]
            _done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for future in pending:
                future.cancel()
            failed = next((f for f in futures if f.done() and not f.cancelled() and f.exception()), None)
            if failed is not None:
                raise _error_of(failed)
            return [document for future in futures for document in future.result()]

    def _one(self, work: TaskWork, index: int) -> list[str]:
        if self._cancelled.is_set():
            raise CancelledError(f"task {index} not started: the run was cancelled")
        return list(work([index]))


def _error_of(future: Future[list[str]]) -> BaseException:
    error = future.exception()
    assert error is not None
    return error


def run_plan_in_process(
    plan_uri: str,
    *,
    s3: S3Settings | None = None,
    workers: int | None = None,
    sizing: TaskSizing | None = None,
    executor: InProcessTaskExecutor | None = None,
) -> RunResult:
    """Run the plan at `plan_uri` in this process (the Spark job's code, no JVM); writes and returns
    its result (see `driver.run_plan`: never raises for a failed run; idempotent)."""
    return run_plan(plan_uri, executor or InProcessTaskExecutor(workers), s3=s3, sizing=sizing)
