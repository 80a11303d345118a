"""Asynchronous Lambda invocations with boto3 (the commit function starting a maintenance pass)."""

from __future__ import annotations

import json
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.exceptions import LambdaInvokeError


class AsyncLambdaInvoker:
    """Invokes one function with `InvocationType=Event` (Lambda queues it, retries it twice)."""

    def __init__(self, function_arn: str, client: Any = None) -> None:
        self._function_arn = function_arn
        self._client = client

    def invoke(self, payload: dict[str, Any]) -> None:
        """Queue one invocation with `payload`."""
        try:
            self._lambda().invoke(
                FunctionName=self._function_arn, InvocationType="Event", Payload=json.dumps(payload).encode()
            )
        except (ClientError, BotoCoreError) as exc:
            raise LambdaInvokeError(f"invoke {self._function_arn}: {exc}") from exc

    def _lambda(self) -> Any:
        if self._client is None:
            self._client = boto3.client("lambda", config=Config(retries={"mode": "standard"}))
        return self._client
