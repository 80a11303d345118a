"""What Lambda handlers get besides their event (the context object Powertools reads), and the EMF
records they print."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kafscale_iceberg.metrics import EMF_NAMESPACE


@dataclass
class LambdaContext:
    """The attributes Powertools reads from the Lambda context object."""

    function_name: str = "router"
    memory_limit_in_mb: int = 256
    aws_request_id: str = "req-1"
    timeout_s: float = 900.0

    def get_remaining_time_in_millis(self) -> int:
        """The whole timeout (a handler reads it when it starts)."""
        return int(self.timeout_s * 1000)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"


def emf_records(stdout: str) -> list[dict[str, Any]]:
    """The EMF records a handler printed (Powertools prints one JSON object per line)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{") and '"_aws"' in line]


def emf_values(records: list[dict[str, Any]], metric: str) -> list[tuple[dict[str, Any], list[float]]]:
    """Each record holding `metric`: its dimensions (name -> value) and the metric's values."""
    found = []
    for record in records:
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == EMF_NAMESPACE
        if metric in {m["Name"] for m in directive["Metrics"]}:
            (dimensions,) = directive["Dimensions"]
            found.append(({name: record[name] for name in dimensions}, record[metric]))
    return found
