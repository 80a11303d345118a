"""The deployment environment: what the stack sets is laid over the user's config file, then validated."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import yaml

from kafscale_iceberg.adapters.secrets_manager import SecretsManagerSecretSource
from kafscale_iceberg.config import (
    DEPLOYMENT_VARIABLES,
    apply_deployment_environment,
    config_from_environment,
)
from kafscale_iceberg.exceptions import ConfigError, ConfigValidationError, SecretAccessError
from tests.support.moto import MotoEndpoint

# What a user writes before the stack exists: no queue, application, role, runs bucket or credentials.
USER_FILE: dict[str, Any] = {
    "s3": {"bucket": "kafscale-data", "namespace": "production"},
    "iceberg": {"catalog": {"type": "glue"}, "warehouse": "s3://lake/warehouse"},
    "runner": {
        "type": "emr_serverless",
        "emr_serverless": {"spark_submit_parameters": "--conf spark.executor.cores=4"},
    },
    "mappings": [{"topic": "orders", "table": "shop.orders"}],
}

ROLE_ARN = "arn:aws:iam::123456789012:role/kafscale-emr-job"
# What template.yaml sets on a function (values as CloudFormation would resolve them).
STACK_ENV = {
    "KAFSCALE_ICEBERG_S3_BUCKET": "kafscale-data",
    "KAFSCALE_ICEBERG_S3_NAMESPACE": "production",
    "KAFSCALE_ICEBERG_ETCD_ENDPOINTS": "https://etcd-0.internal:2379,https://etcd-1.internal:2379",
    "KAFSCALE_ICEBERG_OFFSETS_BACKEND": "etcd",
    "KAFSCALE_ICEBERG_WORK_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/kafscale-work.fifo",
    "KAFSCALE_ICEBERG_REJECTED_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/kafscale-rejected",
    "KAFSCALE_ICEBERG_RUNS_LOCATION": "s3://stack-runs-bucket/runs",
    "KAFSCALE_ICEBERG_RUNNER_TYPE": "emr_serverless",
    "KAFSCALE_ICEBERG_EMR_APPLICATION_ID": "00fabcdefg123456",
    "KAFSCALE_ICEBERG_EMR_EXECUTION_ROLE_ARN": ROLE_ARN,
    "KAFSCALE_ICEBERG_EMR_ENTRY_POINT": "s3://stack-runs-bucket/spark/spark_app/main.py",
    "KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE": "s3://stack-runs-bucket/spark/kafscale-iceberg-venv.tar.gz",
    "KAFSCALE_ICEBERG_EMR_LOG_URI": "s3://stack-runs-bucket/emr-logs/",
}


class FixedSecrets:
    """A secret source for tests that need no AWS: one value per id, counting reads."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.reads: list[str] = []

    def read_secret(self, secret_id: str) -> str:
        self.reads.append(secret_id)
        return self.values[secret_id]


def test_the_user_file_alone_is_incomplete_for_aws() -> None:
    with pytest.raises(ConfigValidationError) as caught:
        apply_deployment_environment(USER_FILE, {}, source="config.yaml")
    keys = {key for key, _ in caught.value.problems}
    assert {"runner.emr_serverless.application_id", "runner.emr_serverless.execution_role_arn"} <= keys


def test_the_stack_environment_completes_the_user_file() -> None:
    config = apply_deployment_environment(USER_FILE, STACK_ENV, source="config.yaml")

    emr = config.runner.emr_serverless
    assert config.runner.type == "emr_serverless"
    assert emr.application_id == "00fabcdefg123456"
    assert emr.execution_role_arn == ROLE_ARN
    assert emr.entry_point == "s3://stack-runs-bucket/spark/spark_app/main.py"
    assert emr.log_uri == "s3://stack-runs-bucket/emr-logs/"
    assert emr.spark_submit_parameters == "--conf spark.executor.cores=4"  # the file's own keys stay
    assert config.runs.location == "s3://stack-runs-bucket/runs"
    assert config.notifications.work_queue_url == STACK_ENV["KAFSCALE_ICEBERG_WORK_QUEUE_URL"]
    assert config.notifications.rejected_queue_url == STACK_ENV["KAFSCALE_ICEBERG_REJECTED_QUEUE_URL"]
    assert config.etcd.endpoints == ("https://etcd-0.internal:2379", "https://etcd-1.internal:2379")
    assert config.source == "config.yaml"


def test_the_caller_data_is_not_modified() -> None:
    before = json.dumps(USER_FILE, sort_keys=True)
    apply_deployment_environment(USER_FILE, STACK_ENV, source="config.yaml")
    assert json.dumps(USER_FILE, sort_keys=True) == before


def test_a_set_variable_wins_over_the_file_and_the_difference_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = {**USER_FILE, "runs": {"location": "s3://somewhere-else/runs"}}
    with caplog.at_level(logging.WARNING, logger="kafscale_iceberg.config.deployment"):
        config = apply_deployment_environment(data, STACK_ENV, source="config.yaml")
    assert config.runs.location == "s3://stack-runs-bucket/runs"
    assert any(
        "runs.location" in r.getMessage() and "KAFSCALE_ICEBERG_RUNS_LOCATION" in r.getMessage()
        for r in caplog.records
    )


def test_an_empty_variable_leaves_the_file_value() -> None:
    data = {**USER_FILE, "s3": {"bucket": "kafscale-data", "namespace": "from-the-file"}}
    config = apply_deployment_environment(
        data, {**STACK_ENV, "KAFSCALE_ICEBERG_S3_NAMESPACE": ""}, source="config.yaml"
    )
    assert config.s3.namespace == "from-the-file"


def test_the_stack_venv_archive_replaces_an_image_from_the_file() -> None:
    data = {
        **USER_FILE,
        "runner": {"type": "emr_serverless", "emr_serverless": {"image": "123.dkr.ecr/x:1"}},
    }
    config = apply_deployment_environment(data, STACK_ENV, source="config.yaml")
    assert config.runner.emr_serverless.image == ""
    assert config.runner.emr_serverless.venv_archive == STACK_ENV["KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE"]


def test_the_stack_image_replaces_a_venv_archive_from_the_file() -> None:
    data = {
        **USER_FILE,
        "runner": {"type": "emr_serverless", "emr_serverless": {"venv_archive": "s3://a/b.tar.gz"}},
    }
    env = {k: v for k, v in STACK_ENV.items() if k != "KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE"}
    env["KAFSCALE_ICEBERG_EMR_IMAGE"] = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/kafscale-spark:1"
    config = apply_deployment_environment(data, env, source="config.yaml")
    assert config.runner.emr_serverless.venv_archive == ""
    assert config.runner.emr_serverless.image == env["KAFSCALE_ICEBERG_EMR_IMAGE"]


def test_an_invalid_environment_value_is_reported_under_its_variable() -> None:
    env = {**STACK_ENV, "KAFSCALE_ICEBERG_EMR_EXECUTION_ROLE_ARN": "kafscale-emr-job"}
    with pytest.raises(ConfigValidationError) as caught:
        apply_deployment_environment(USER_FILE, env, source="config.yaml")
    keys = [key for key, _ in caught.value.problems]
    assert keys == ["$KAFSCALE_ICEBERG_EMR_EXECUTION_ROLE_ARN (runner.emr_serverless.execution_role_arn)"]
    assert "values from the deployment environment" in str(caught.value)


def test_a_file_problem_keeps_its_yaml_key() -> None:
    data = {**USER_FILE, "runs": {"max_segments_per_run": 0}}
    with pytest.raises(ConfigValidationError) as caught:
        apply_deployment_environment(data, STACK_ENV, source="config.yaml")
    assert [key for key, _ in caught.value.problems] == ["runs.max_segments_per_run"]


def test_etcd_credentials_come_from_the_secret_and_stay_secret() -> None:
    secrets = FixedSecrets(
        {"arn:etcd": json.dumps({"username": "kafscale", "password": "s3cr3t-pa55", "endpoints": ["e:2379"]})}
    )
    env = {**STACK_ENV, "KAFSCALE_ICEBERG_ETCD_SECRET_ARN": "arn:etcd"}
    config = apply_deployment_environment(USER_FILE, env, source="config.yaml", secrets=secrets)
    assert config.etcd.username == "kafscale"
    assert config.etcd.password.get_secret_value() == "s3cr3t-pa55"
    assert config.etcd.endpoints == ("e:2379",)  # the secret's endpoints win over the variable's
    assert "s3cr3t-pa55" not in repr(config)
    assert secrets.reads == ["arn:etcd"]


def test_a_secret_replacing_a_file_password_never_logs_either(caplog: pytest.LogCaptureFixture) -> None:
    data = {**USER_FILE, "etcd": {"username": "old", "password": "old-pa55"}}
    secrets = FixedSecrets({"arn:etcd": json.dumps({"username": "kafscale", "password": "new-pa55"})})
    env = {**STACK_ENV, "KAFSCALE_ICEBERG_ETCD_SECRET_ARN": "arn:etcd"}
    with caplog.at_level(logging.WARNING, logger="kafscale_iceberg.config.deployment"):
        apply_deployment_environment(data, env, source="config.yaml", secrets=secrets)
    assert any("etcd.password" in r.getMessage() for r in caplog.records)
    assert not any("pa55" in r.getMessage() for r in caplog.records)


def test_a_rest_catalog_token_comes_from_its_secret() -> None:
    data = {**USER_FILE, "iceberg": {"catalog": {"type": "rest", "uri": "https://catalog.example.com"}}}
    secrets = FixedSecrets({"arn:catalog": json.dumps({"token": "t0ken"})})
    env = {
        **STACK_ENV,
        "KAFSCALE_ICEBERG_CATALOG_SECRET_ARN": "arn:catalog",
        "KAFSCALE_ICEBERG_RUNS_LOCATION": "s3://stack-runs-bucket/runs",
    }
    config = apply_deployment_environment(data, env, source="config.yaml", secrets=secrets)
    assert config.iceberg.catalog.token.get_secret_value() == "t0ken"


@pytest.mark.parametrize(
    ("secret_text", "problem"),
    [
        ("username=kafscale password=hunter2", "is not JSON"),
        (json.dumps(["hunter2"]), "must be a JSON object"),
        (json.dumps({"username": "kafscale", "password": 12345}), "'password' must be a string"),
        (json.dumps({"user": "kafscale", "pass": "hunter2"}), "has none of the keys"),
    ],
)
def test_a_malformed_secret_names_the_variable_and_never_echoes_it(secret_text: str, problem: str) -> None:
    secrets = FixedSecrets({"arn:etcd": secret_text})
    env = {**STACK_ENV, "KAFSCALE_ICEBERG_ETCD_SECRET_ARN": "arn:etcd"}
    with pytest.raises(ConfigError) as caught:
        apply_deployment_environment(USER_FILE, env, source="config.yaml", secrets=secrets)
    assert caught.value.key == "$KAFSCALE_ICEBERG_ETCD_SECRET_ARN"
    assert problem in str(caught.value)
    assert "hunter2" not in str(caught.value)
    assert "12345" not in str(caught.value)


def test_variables_are_unique_and_fill_distinct_keys() -> None:
    names = [v.name for v in DEPLOYMENT_VARIABLES]
    keys = [v.key for v in DEPLOYMENT_VARIABLES]
    assert len(set(names)) == len(names)
    assert len(set(keys)) == len(keys)
    assert all(name.startswith("KAFSCALE_ICEBERG_") for name in names)


# ------------------------------------------------------------------------------------------------
# Against Secrets Manager (moto server)


def _secret(moto: MotoEndpoint, value: str) -> str:
    client: Any = moto.client("secretsmanager")
    arn: str = client.create_secret(Name=f"etcd-{uuid4().hex[:8]}", SecretString=value)["ARN"]
    return arn


def test_the_etcd_secret_is_read_from_secrets_manager(moto_server: MotoEndpoint) -> None:
    arn = _secret(moto_server, json.dumps({"username": "kafscale", "password": "pw"}))
    source = SecretsManagerSecretSource(moto_server.client("secretsmanager"))  # type: ignore[arg-type]
    env = {**STACK_ENV, "KAFSCALE_ICEBERG_ETCD_SECRET_ARN": arn}
    config = apply_deployment_environment(USER_FILE, env, source="config.yaml", secrets=source)
    assert (config.etcd.username, config.etcd.password.get_secret_value()) == ("kafscale", "pw")


def test_a_missing_secret_is_a_terminal_error_naming_it(moto_server: MotoEndpoint) -> None:
    source = SecretsManagerSecretSource(moto_server.client("secretsmanager"))  # type: ignore[arg-type]
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope-AbCdEf"
    env = {**STACK_ENV, "KAFSCALE_ICEBERG_ETCD_SECRET_ARN": missing}
    with pytest.raises(SecretAccessError) as caught:
        apply_deployment_environment(USER_FILE, env, source="config.yaml", secrets=source)
    assert caught.value.code == "ResourceNotFoundException"
    assert missing in str(caught.value)
    assert not caught.value.transient


def test_config_from_environment_applies_the_stack_environment(
    moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What every function runs at cold start: the file, the stack's variables, the etcd secret."""
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(USER_FILE))
    arn = _secret(moto_server, json.dumps({"username": "kafscale", "password": "pw"}))
    for name, value in {
        **STACK_ENV,
        "KAFSCALE_ICEBERG_CONFIG": str(config_file),
        "KAFSCALE_ICEBERG_ETCD_SECRET_ARN": arn,
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": moto_server.url,
    }.items():
        monkeypatch.setenv(name, value)

    config = config_from_environment()

    assert config.runner.emr_serverless.application_id == "00fabcdefg123456"
    assert config.etcd.username == "kafscale"
    assert config.source == str(config_file)


def test_an_unset_s3_region_takes_the_functions_aws_region_and_a_set_one_wins() -> None:
    """pyiceberg looks a bucket's region up through the global endpoint when `s3.region` is unset,
    which a VPC without NAT cannot reach: the functions default it from Lambda's `AWS_REGION`."""
    unset = apply_deployment_environment(USER_FILE, {**STACK_ENV, "AWS_REGION": "eu-west-3"}, source="c.yaml")
    assert unset.s3.region == "eu-west-3"
    with_region = {**USER_FILE, "s3": {**USER_FILE["s3"], "region": "us-west-2"}}
    given = apply_deployment_environment(
        with_region, {**STACK_ENV, "AWS_REGION": "eu-west-3"}, source="c.yaml"
    )
    assert given.s3.region == "us-west-2"
