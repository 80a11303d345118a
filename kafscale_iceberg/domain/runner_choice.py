"""What each runner can do, declared once (`RunnerTraits`), and which runner a run goes to.

A runner declares itself: its kind, the largest run it takes, whether the state machine starts its
job (so a job an aborted run abandons is found by the run id, not the ticket), and the error names by
which its platform reports that it killed a run. The launcher, the run steps and the one-machine loop
ask the declaration; none tests a runner's kind. Its adapter answers `JobRunner.traits` with it and
builds its own state-machine request (`JobRunner.step_request`), so a third way to run a plan (a
batched multi-topic run, say) is one declaration here, one adapter and one branch of the state
machine's `Runner?` choice.

On AWS (`runner.type: emr_serverless`) the lineup is the Lambda runner (the Spark job's tasks
in-process, `functions/plan_runner.py`; at most `runner.lambda.max_bytes` planned bytes, `0` leaves it
out), then EMR Serverless (any size). A run goes to the first runner of the lineup that takes its
planned bytes. Elsewhere the lineup is the configured runner alone (`local` Spark, `inline`).

A run a size-capped runner could not finish (Lambda killed it: timeout, out of memory) would be
planned again at about the same size and killed again, forever; the abort step records the kill in
the topic's backoff document (`services/backoff.py`) and the topic's next runs skip every capped
runner until one of its runs commits (`lambda_kill_reason`). The kill is recognised by the error name
of the failed task, which the state machine hands the abort step as a field of its own (`error`),
never by the text of the failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class RunnerKind(StrEnum):
    """Where a run executes (`RunPlan.runner`, `RunTicket.runner`)."""

    EMR_SERVERLESS = "emr_serverless"
    LAMBDA = "lambda"
    LOCAL = "local"
    INLINE = "inline"


# The error names Lambda and Step Functions report for a runner invocation Lambda killed, by what
# they mean (`LAMBDA_KILL_CAUSES`: the same, as metric label values).
_LAMBDA_KILLS = MappingProxyType(
    {
        "Sandbox.Timedout": "timed out",
        "States.Timeout": "timed out",
        "Runtime.OutOfMemory": "ran out of memory",
    }
)
LAMBDA_KILL_CAUSES = {"timed out": "timeout", "ran out of memory": "out_of_memory"}


@dataclass(frozen=True)
class RunnerTraits:
    """What a runner can do. `max_bytes`: the largest run (planned bytes) it takes, None for any;
    `job_started_by_state_machine`: its job is started by the state machine's task from the request
    the runner built (`JobRunner.step_request`), so a ticket carries no job id and the abort step
    finds a job still running by the run id; `kill_errors`: the task error names meaning its platform
    killed the run, by what happened ("timed out")."""

    kind: RunnerKind
    max_bytes: int | None = None
    job_started_by_state_machine: bool = False
    kill_errors: Mapping[str, str] = field(default_factory=dict)

    def takes(self, planned_bytes: int) -> bool:
        """Whether a run of `planned_bytes` fits this runner."""
        return self.max_bytes is None or planned_bytes <= self.max_bytes

    def killed_by(self, error: str | None) -> str | None:
        """What the platform killed this runner's run for, from the failed task's error name (the
        state machine's `$.error.Error`, as is); None when it was not killed (the run failed on its
        own: a bigger runner would not help)."""
        return self.kill_errors.get(error) if error else None


EMR_SERVERLESS_TRAITS = RunnerTraits(RunnerKind.EMR_SERVERLESS, job_started_by_state_machine=True)
LOCAL_TRAITS = RunnerTraits(RunnerKind.LOCAL)
INLINE_TRAITS = RunnerTraits(RunnerKind.INLINE)


def lambda_runner_traits(max_bytes: int) -> RunnerTraits:
    """The Lambda runner: runs of at most `max_bytes` (`runner.lambda.max_bytes`), killed by Lambda
    at its timeout or memory."""
    return RunnerTraits(RunnerKind.LAMBDA, max_bytes=max_bytes, kill_errors=_LAMBDA_KILLS)


@dataclass(frozen=True)
class RunnerLineup:
    """The runners a deployment offers, in the order a run tries them (the cheapest per run first;
    the last takes any size)."""

    runners: tuple[RunnerTraits, ...]

    @classmethod
    def configured(cls, runner_type: str, lambda_max_bytes: int) -> RunnerLineup:
        """The lineup of `runner.type` and `runner.lambda.max_bytes` (see the module docstring)."""
        kind = RunnerKind(runner_type)
        if kind is RunnerKind.EMR_SERVERLESS:
            small = (lambda_runner_traits(lambda_max_bytes),) if lambda_max_bytes > 0 else ()
            return cls((*small, EMR_SERVERLESS_TRAITS))
        return cls((LOCAL_TRAITS if kind is RunnerKind.LOCAL else INLINE_TRAITS,))

    def choose(self, planned_bytes: int, *, after_kill: bool) -> RunnerTraits:
        """The first runner that takes `planned_bytes`; `after_kill`: the topic's last run was killed
        in a size-capped runner and nothing was committed since, so only an uncapped one."""
        fitting = [
            r for r in self.runners if r.takes(planned_bytes) and not (after_kill and r.max_bytes is not None)
        ]
        return fitting[0] if fitting else self.runners[-1]

    def traits(self, kind: RunnerKind) -> RunnerTraits:
        """The declaration of `kind` (a ticket from before a lineup change: the kind's own)."""
        for runner in self.runners:
            if runner.kind is kind:
                return runner
        return _DECLARED[kind]


_DECLARED: Mapping[RunnerKind, RunnerTraits] = MappingProxyType(
    {
        RunnerKind.EMR_SERVERLESS: EMR_SERVERLESS_TRAITS,
        RunnerKind.LAMBDA: lambda_runner_traits(0),
        RunnerKind.LOCAL: LOCAL_TRAITS,
        RunnerKind.INLINE: INLINE_TRAITS,
    }
)
