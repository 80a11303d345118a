"""Recognising a foreign (library) error that means "the dependency is unavailable for now".

By class name per top-level package and by the shape of an AWS error answer, so that nothing here
imports requests, sqlalchemy, botocore, urllib3 or pyarrow: a connection refused or reset, a timeout,
an AWS throttling answer or a 5xx. Used where foreign errors are translated (the Iceberg adapters) and
by `run`'s outage classification (`local.pipeline.is_outage`), so both agree on what is transient.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_UNREACHABLE: Mapping[str, frozenset[str]] = {
    "requests": frozenset({"ConnectionError", "Timeout", "ConnectTimeout", "ReadTimeout"}),
    "sqlalchemy": frozenset({"OperationalError", "TimeoutError", "DisconnectionError"}),
    "botocore": frozenset(
        {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError"}
    ),
    "urllib3": frozenset({"NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "MaxRetryError"}),
}

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalError",
        "InternalFailure",
        "InternalServiceException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
"""AWS error codes that mean "retry later" (throttling, a server-side failure, a timeout)."""

# pyarrow's S3 filesystem raises OSError("... AWS Error SLOW_DOWN during ... operation: ...").
_ARROW_AWS_UNAVAILABLE = re.compile(
    r"AWS Error (NETWORK_CONNECTION|SLOW_DOWN|SERVICE_UNAVAILABLE|THROTTLING|INTERNAL_FAILURE"
    r"|REQUEST_TIMEOUT)|HTTP status 5\d\d"
)


def named_in(exc: BaseException, names: Mapping[str, frozenset[str]]) -> bool:
    """Whether `exc`'s class is one of `names[its top-level package]`."""
    package = type(exc).__module__.split(".")[0]
    return type(exc).__name__ in names.get(package, frozenset())


def is_aws_retryable(exc: BaseException) -> bool:
    """An AWS SDK error answer (botocore `ClientError` shape) of throttling or a 5xx."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    error = response.get("Error")
    code = str(error.get("Code", "")) if isinstance(error, dict) else ""
    metadata = response.get("ResponseMetadata")
    status = metadata.get("HTTPStatusCode") if isinstance(metadata, dict) else None
    return code in THROTTLING_CODES or (isinstance(status, int) and status >= 500)


def is_unreachable(exc: BaseException) -> bool:
    """A foreign error meaning the service did not answer, or answered throttling / 5xx: retry later."""
    if isinstance(exc, (ConnectionError, TimeoutError)) or named_in(exc, _UNREACHABLE):
        return True
    if is_aws_retryable(exc):
        return True
    return isinstance(exc, OSError) and bool(_ARROW_AWS_UNAVAILABLE.search(str(exc)))
