"""Secrets read from AWS Secrets Manager (etcd and catalog credentials of a deployed stack)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.exceptions import (
    SecretAccessError,
    SecretUnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

__all__ = ["SecretAccessError", "SecretUnavailableError", "SecretsManagerSecretSource"]

# Codes a retry cannot fix: the secret, its key or the caller's permissions must change.
_TERMINAL = {
    "ResourceNotFoundException",
    "AccessDeniedException",
    "AccessDenied",
    "DecryptionFailure",
    "InvalidRequestException",
    "InvalidParameterException",
    "ValidationException",
}


class SecretsManagerSecretSource:
    """Reads a secret's current `SecretString`; the client is made on first use."""

    def __init__(self, client: SecretsManagerClient | None = None, *, region: str | None = None) -> None:
        self._client = client
        self._region = region

    def read_secret(self, secret_id: str) -> str:
        """The secret's string value (never logged).

        Raises `SecretAccessError` (terminal) or `SecretUnavailableError` (transient).
        """
        try:
            response = self._secrets().get_secret_value(SecretId=secret_id)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "ClientError"))
            if code in _TERMINAL:
                raise SecretAccessError(
                    secret_id,
                    code,
                    "check that the secret exists in this account and region, and that the function's role "
                    "may call secretsmanager:GetSecretValue on it (and kms:Decrypt on its key)",
                ) from exc
            raise SecretUnavailableError(f"secret {secret_id}: {code} (retry later)") from exc
        except BotoCoreError as exc:
            raise SecretUnavailableError(f"secret {secret_id}: {exc}") from exc
        value: str | None = response.get("SecretString")
        if value is None:
            raise SecretAccessError(
                secret_id, "BinarySecret", "store the value as a JSON SecretString, not a binary secret"
            )
        return value

    def _secrets(self) -> SecretsManagerClient:
        if self._client is None:
            client: SecretsManagerClient = boto3.client(
                "secretsmanager", region_name=self._region, config=Config(retries={"mode": "standard"})
            )
            self._client = client
        return self._client
