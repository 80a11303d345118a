"""Which runner a run goes to (`domain/runner_choice.py`), as the launcher applies it, and what each
runner declares of itself (asked instead of testing its kind)."""

from __future__ import annotations

from typing import Any

import pytest

from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.runner_choice import (
    EMR_SERVERLESS_TRAITS,
    RunnerKind,
    RunnerLineup,
    RunnerTraits,
    lambda_runner_traits,
)
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.execution.job_runner import ChosenJobRunner, InProcessJobRunner
from tests.test_config import minimal


def _choose(runner_type: str, planned: int, max_bytes: int, *, after_kill: bool = False) -> RunnerKind:
    return RunnerLineup.configured(runner_type, max_bytes).choose(planned, after_kill=after_kill).kind


@pytest.mark.parametrize(
    ("planned", "max_bytes", "expected"),
    [
        (1, 100, RunnerKind.LAMBDA),
        (100, 100, RunnerKind.LAMBDA),  # up to and including the limit
        (101, 100, RunnerKind.EMR_SERVERLESS),
        (1, 0, RunnerKind.EMR_SERVERLESS),  # 0: every run to EMR
    ],
)
def test_on_aws_a_run_up_to_max_bytes_goes_to_the_lambda_runner(
    planned: int, max_bytes: int, expected: RunnerKind
) -> None:
    assert _choose("emr_serverless", planned, max_bytes) is expected


@pytest.mark.parametrize("runner_type", ["local", "inline"])
def test_on_one_machine_a_run_goes_to_the_configured_runner_whatever_its_size(runner_type: str) -> None:
    assert _choose(runner_type, 1, 100) is RunnerKind(runner_type)


def test_after_the_lambda_runner_was_killed_even_a_small_run_goes_to_emr() -> None:
    assert _choose("emr_serverless", 1, 100, after_kill=True) is RunnerKind.EMR_SERVERLESS
    assert _choose("local", 1, 100, after_kill=True) is RunnerKind.LOCAL


def test_a_third_runner_is_one_declaration_in_the_lineup_not_a_branch() -> None:
    """A runner between the Lambda runner and EMR (say, a batched run of 2 GiB at most) takes the
    runs its declaration fits, with no code testing its kind."""
    middle = RunnerTraits(RunnerKind.INLINE, max_bytes=2_000)
    lineup = RunnerLineup((lambda_runner_traits(100), middle, EMR_SERVERLESS_TRAITS))
    assert [lineup.choose(n, after_kill=False).kind for n in (100, 101, 2_000, 2_001)] == [
        RunnerKind.LAMBDA,
        RunnerKind.INLINE,
        RunnerKind.INLINE,
        RunnerKind.EMR_SERVERLESS,
    ]
    assert lineup.choose(1, after_kill=True) is EMR_SERVERLESS_TRAITS  # every capped one skipped


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("Sandbox.Timedout", "timed out"),
        ("States.Timeout", "timed out"),
        ("Runtime.OutOfMemory", "ran out of memory"),
        ("DataError", None),
        ("States.TaskFailed", None),
        (None, None),  # the one-machine loop's aborts carry no error name
    ],
)
def test_a_lambda_runner_killed_by_lambda_is_told_by_the_failed_tasks_error_name(
    error: str | None, expected: str | None
) -> None:
    lineup = RunnerLineup.configured("emr_serverless", 100)
    assert lineup.traits(RunnerKind.LAMBDA).killed_by(error) == expected
    assert lineup.traits(RunnerKind.EMR_SERVERLESS).killed_by(error) is None  # EMR is the bigger runner


def test_a_kills_error_name_in_the_failures_text_alone_is_not_a_kill() -> None:
    # A run that failed on its own may quote anything in its cause (a record's text, a log line).
    killed = lambda_runner_traits(100).killed_by("DataError: record 3 says Sandbox.Timedout")
    assert killed is None


def test_a_ticket_of_a_runner_the_lineup_no_longer_offers_keeps_its_kinds_declaration() -> None:
    """`runner.lambda.max_bytes: 0` after a Lambda run started: its abort still tells a kill."""
    lineup = RunnerLineup.configured("emr_serverless", 0)
    assert [r.kind for r in lineup.runners] == [RunnerKind.EMR_SERVERLESS]
    assert lineup.traits(RunnerKind.LAMBDA).killed_by("Runtime.OutOfMemory") == "ran out of memory"
    assert lineup.traits(RunnerKind.EMR_SERVERLESS).job_started_by_state_machine


def test_each_runner_builds_its_own_step_request_and_the_chosen_one_is_asked(tmp_path: Any) -> None:
    """The StartJob step asks the plan's runner for the state machine's request: the Lambda runner
    needs nothing but the ticket; EMR's request is its StartJobRun (checked in
    tests/test_emr_serverless.py)."""
    lambda_runner = InProcessJobRunner(traits=lambda_runner_traits(100))
    other = InProcessJobRunner()  # inline: stands in for a second runner of another kind
    runners = ChosenJobRunner([lambda_runner, other])
    plan = RunPlan.model_construct(run_id="r", runner=RunnerKind.LAMBDA)
    assert runners.runner_of(RunnerKind.LAMBDA) is lambda_runner
    assert runners.runner_of(RunnerKind.EMR_SERVERLESS) is other  # unknown kinds: the last (default)
    assert runners.step_request(plan, "s3://b/plan.json") == {}
    assert runners.traits is other.traits


def test_runner_lambda_max_bytes_takes_sizes_and_defaults_to_the_measured_limit() -> None:
    base = minimal()
    default = config_from_mapping(base, source="test").runner.lambda_.max_bytes
    assert default == 512 * 1024**2
    sized = config_from_mapping({**base, "runner": {"lambda": {"max_bytes": "64MiB"}}}, source="test")
    assert sized.runner.lambda_.max_bytes == 64 * 1024**2
    off = config_from_mapping({**base, "runner": {"lambda": {"max_bytes": 0}}}, source="test")
    assert off.runner.lambda_.max_bytes == 0


def test_plans_and_tickets_written_before_the_choice_run_on_emr() -> None:
    """A plan or ticket without `runner` (from before the Lambda runner) keeps going to EMR."""
    assert RunPlan.model_fields["runner"].default is RunnerKind.EMR_SERVERLESS
    assert RunTicket.model_fields["runner"].default is RunnerKind.EMR_SERVERLESS
