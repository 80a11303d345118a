"""The checkpoint function: the stack's one function in the VPC and its only etcd client.

Every other function runs outside the VPC (so it reaches AWS APIs with no NAT gateway and no
interface endpoint) and calls the checkpoint store through this one (`adapters/lambda_checkpoints.py`):
one `CheckpointStore` call per invocation, as JSON (`domain/checkpoint_wire.py`), run on etcd by
`services/checkpoint_gateway.py`; the store's errors come back in the answer. It reads no config file
and calls no AWS API but, when its credentials are in Secrets Manager, `GetSecretValue`.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from kafscale_iceberg.assembly import CheckpointGatewayStores
from kafscale_iceberg.domain.checkpoint_wire import CheckpointRequest
from kafscale_iceberg.services.checkpoint_gateway import serve_checkpoint_request

logger = Logger(service="kafscale-iceberg-checkpoints")


@cache
def _stores() -> CheckpointGatewayStores:
    return CheckpointGatewayStores(os.environ)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One checkpoint store call; returns its answer (value or the store's error)."""
    request = CheckpointRequest.model_validate(event)
    return serve_checkpoint_request(_stores(), request).model_dump(mode="json")
