"""Hands planned runs to the AWS Step Functions state machine that runs, watches and commits them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.exceptions import KafscaleIcebergError, TransientError

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient


class StepFunctionsRunStarter:
    """Starts one state-machine execution per run, named by the run id."""

    def __init__(self, client: SFNClient, state_machine_arn: str) -> None:
        self._sfn = client
        self.state_machine_arn = state_machine_arn

    def start_run(self, ticket: RunTicket) -> None:
        """Start the execution `ticket.run_id`. Idempotent: an execution of that name already
        started with the same input is the same run (Step Functions refuses a second one)."""
        body = json.dumps({"ticket": ticket.model_dump(mode="json")}, separators=(",", ":"))
        try:
            self._sfn.start_execution(stateMachineArn=self.state_machine_arn, name=ticket.run_id, input=body)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ExecutionAlreadyExists":
                return
            if code in {"ThrottlingException", "ServiceUnavailable", "InternalServerError"}:
                raise TransientError(f"starting run {ticket.run_id}: {code}") from exc
            raise KafscaleIcebergError(
                f"starting run {ticket.run_id} on {self.state_machine_arn}: {code}: check the state machine "
                "ARN and the launcher's states:StartExecution permission"
            ) from exc
        except BotoCoreError as exc:
            raise TransientError(f"starting run {ticket.run_id}: {exc}") from exc
