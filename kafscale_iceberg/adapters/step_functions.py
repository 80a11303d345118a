"""Hands planned runs to the AWS Step Functions state machine that runs, watches and commits them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.exceptions import KafscaleIcebergError, RunAttemptEndedError, TransientError

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

_TRANSIENT = {"ThrottlingException", "ServiceUnavailable", "InternalServerError"}


class StepFunctionsRunStarter:
    """Starts one state-machine execution per run, named by the run id; also tells whether one runs."""

    def __init__(self, client: SFNClient, state_machine_arn: str) -> None:
        self._sfn = client
        self.state_machine_arn = state_machine_arn

    def start_run(self, ticket: RunTicket) -> None:
        """Start the execution `ticket.run_id`. Idempotent for the same ticket.

        Execution names are unique per state machine for 90 days. An execution of this name that is
        still running under another lease is a run in flight (transient: retried later); one that
        ended means the attempt was spent without the abort step recording it (the steps died):
        `RunAttemptEndedError`, so the launcher records it and plans the next attempt.
        """
        body = json.dumps({"ticket": ticket.model_dump(mode="json")}, separators=(",", ":"))
        try:
            self._sfn.start_execution(stateMachineArn=self.state_machine_arn, name=ticket.run_id, input=body)
        except ClientError as exc:
            if _code(exc) != "ExecutionAlreadyExists":
                raise self._translate(f"starting run {ticket.run_id}", exc) from exc
        except BotoCoreError as exc:
            raise TransientError(f"starting run {ticket.run_id}: {exc}") from exc
        else:
            return
        status, existing_input = self._describe(ticket.run_id)
        if status == "RUNNING":
            if existing_input is not None and json.loads(existing_input) == json.loads(body):
                return
            raise TransientError(
                f"run {ticket.run_id} is still executing under an earlier lease; it will be retried "
                "after that execution ends"
            )
        raise RunAttemptEndedError(ticket.run_id, f"its execution already ended {status}")

    def is_running(self, run_id: str) -> bool | None:
        """The reconciler's question: True while the execution runs, False once it ended, None if
        there is none (a launcher between claiming the lease and starting it)."""
        status = self.run_status(run_id)
        return None if status is None else status == "RUNNING"

    def run_status(self, run_id: str) -> str | None:
        """The execution's status (RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED), None if none exists."""
        return self._describe(run_id)[0]

    def _describe(self, run_id: str) -> tuple[str | None, str | None]:
        arn = execution_arn(self.state_machine_arn, run_id)
        try:
            response = self._sfn.describe_execution(executionArn=arn)
        except ClientError as exc:
            if _code(exc) == "ExecutionDoesNotExist":
                return None, None
            raise self._translate(f"describing execution {arn}", exc) from exc
        except BotoCoreError as exc:
            raise TransientError(f"describing execution {arn}: {exc}") from exc
        return response["status"], response.get("input")

    def _translate(self, action: str, exc: ClientError) -> KafscaleIcebergError:
        code = _code(exc)
        if code in _TRANSIENT:
            return TransientError(f"{action}: {code}")
        return KafscaleIcebergError(
            f"{action} on {self.state_machine_arn}: {code}: check the state machine ARN and the "
            "function's states:StartExecution / states:DescribeExecution permissions"
        )


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN of the execution `name` of a state machine (`...:execution:<machine>:<name>`)."""
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
