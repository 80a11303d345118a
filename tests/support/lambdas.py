"""What Lambda handlers get besides their event: the context object Powertools reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LambdaContext:
    """The attributes Powertools reads from the Lambda context object."""

    function_name: str = "router"
    memory_limit_in_mb: int = 256
    aws_request_id: str = "req-1"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"
