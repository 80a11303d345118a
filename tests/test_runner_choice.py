"""Which runner a run goes to (`domain/runner_choice.py`), as the launcher applies it."""

from __future__ import annotations

import pytest

from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.runner_choice import RunnerKind, choose_runner, lambda_kill
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.domain.tickets import RunTicket
from tests.test_config import minimal


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
    assert choose_runner("emr_serverless", planned, max_bytes, after_lambda_kill=False) is expected


@pytest.mark.parametrize("runner_type", ["local", "inline"])
def test_on_one_machine_a_run_goes_to_the_configured_runner_whatever_its_size(runner_type: str) -> None:
    assert choose_runner(runner_type, 1, 100, after_lambda_kill=False) is RunnerKind(runner_type)


def test_after_the_lambda_runner_was_killed_even_a_small_run_goes_to_emr() -> None:
    assert choose_runner("emr_serverless", 1, 100, after_lambda_kill=True) is RunnerKind.EMR_SERVERLESS
    assert choose_runner("local", 1, 100, after_lambda_kill=True) is RunnerKind.LOCAL


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
    assert lambda_kill(RunnerKind.LAMBDA, error) == expected
    assert lambda_kill(RunnerKind.EMR_SERVERLESS, error) is None  # EMR is already the bigger runner


def test_a_kills_error_name_in_the_failures_text_alone_is_not_a_kill() -> None:
    # A run that failed on its own may quote anything in its cause (a record's text, a log line).
    assert lambda_kill(RunnerKind.LAMBDA, "DataError: record 3 says Sandbox.Timedout") is None


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
