"""`run` rides out a dependency's outage and stops on anything else (issue 12 §2): the classification
on real errors - ours as the adapters raise them, botocore's as boto3 raises them, pyarrow's message."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, translate_catalog_error
from kafscale_iceberg.exceptions import (
    CatalogUnavailableError,
    CheckpointRequestError,
    CheckpointUnavailableError,
    ConfigError,
    TableMarkerError,
)
from kafscale_iceberg.local.embedded import free_port
from kafscale_iceberg.local.pipeline import is_outage


def _aws(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


def _raised_from(error: Exception, cause: BaseException) -> Exception:
    try:
        raise error from cause
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (CheckpointUnavailableError("read offsets", ("http://127.0.0.1:1",), "refused"), True),
        (CheckpointRequestError("read offsets", ("http://127.0.0.1:1",), "bad request"), False),
        (ConfigError("s3.bucket", "is required"), False),
        (TableMarkerError("t", "kafscale.offsets.x", "not JSON"), False),
        (ConnectionResetError(104, "Connection reset by peer"), True),
        (TimeoutError("timed out"), True),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (_aws("SlowDown", 503), True),
        (_aws("ThrottlingException", 400), True),
        (_aws("InternalError", 500), True),
        (_aws("AccessDenied", 403), False),
        (_aws("NoSuchBucket", 404), False),
        (OSError("When reading 'k' in bucket 'b': AWS Error SLOW_DOWN during GetObject operation"), True),
        (FileNotFoundError(2, "No such file or directory"), False),
        (_raised_from(RuntimeError("gave up"), ConnectionRefusedError(111, "refused")), True),
        (_raised_from(KeyError("partition"), ValueError("bad")), False),
        (AttributeError("'NoneType' object has no attribute 'offsets'"), False),
        (ValueError("a defect"), False),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_only_a_dependency_unavailable_for_now_is_an_outage(error: BaseException, outage: bool) -> None:
    assert is_outage(error) is outage


def test_a_refused_s3_connection_as_boto3_raises_it_is_an_outage() -> None:
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(EndpointConnectionError) as raised:
        client.list_buckets()
    assert is_outage(raised.value)


def test_glue_throttling_and_5xx_are_a_catalog_outage_not_a_terminal_catalog_error() -> None:
    """Glue answers throttling and 5xx as botocore `ClientError`s; they were translated to the terminal
    `CatalogError`, so a throttled Glue ended `run` instead of being ridden out."""
    settings = CatalogSettings(type="glue", warehouse="s3://w/h")
    for answer in (_aws("ThrottlingException", 400), _aws("InternalServiceException", 500)):
        translated = translate_catalog_error(settings, "load table 'a.b'", answer)
        assert isinstance(translated, CatalogUnavailableError)
        assert translated.transient
    assert not translate_catalog_error(
        settings, "load table 'a.b'", _aws("AccessDeniedException", 400)
    ).transient


def test_glue_max_retries_from_the_config_reaches_botocore_as_a_number() -> None:
    """`iceberg.catalog.properties` values are strings; pyiceberg passed `glue.max-retries` to botocore
    as one, so the catalog failed to open (TypeError). The outage tests lower it to 2."""
    from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog

    settings = CatalogSettings(
        type="glue",
        warehouse="s3://w/h",
        s3_region="us-east-1",
        properties={"glue.max-retries": "2", "glue.endpoint": f"http://127.0.0.1:{free_port()}"},
    )
    catalog: Any = load_iceberg_catalog(settings)
    assert catalog.glue.meta.config.retries["total_max_attempts"] == 3
    with pytest.raises(ConfigError, match=r"glue\.max-retries"):
        load_iceberg_catalog(CatalogSettings(type="glue", properties={"glue.max-retries": "many"}))
