"""Loading an Iceberg catalog (REST, Glue or SQL) with pyiceberg, from typed settings.

With the other `iceberg_*.py` adapters beside it, the only modules that import pyiceberg. Errors are
translated here, once: a rejected credential is a `ConfigError` naming the YAML key; an unreachable catalog a
`CatalogUnavailableError` (transient); anything else a `CatalogError`. Messages name the catalog type
and URI with any password in the URI masked, never a token or password.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    AuthorizationExpiredError,
    ForbiddenError,
    NoSuchNamespaceError,
    NoSuchTableError,
    OAuthError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
    UnauthorizedError,
)

from kafscale_iceberg.adapters.foreign_errors import is_unreachable, named_in
from kafscale_iceberg.exceptions import CatalogError, CatalogUnavailableError, ConfigError, TableMissingError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from kafscale_iceberg.config import KafscaleConfig

logger = logging.getLogger(__name__)

CatalogType = Literal["rest", "glue", "sql"]


@dataclass(frozen=True)
class CatalogSettings:
    """What it takes to open the catalog. Secrets are excluded from `repr`; they are never logged.

    `properties` are passed to pyiceberg as they are and win over the ones derived here (an escape
    hatch: `s3.force-virtual-addressing`, `oauth2-server-uri`, `glue.id`, ...).
    """

    type: CatalogType
    uri: str = ""
    warehouse: str = ""
    name: str = "kafscale"
    token: str = field(default="", repr=False)
    username: str = ""
    password: str = field(default="", repr=False)
    s3_endpoint: str = ""
    s3_region: str = ""
    s3_path_style: bool = False
    glue_endpoint: str = ""
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    sigv4: bool = False
    signing_name: str = ""
    signing_region: str = ""
    oauth2_server_uri: str = ""
    scope: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    def describe(self) -> str:
        """`sql sqlite:////w/catalog.db`, `rest https://…`: type and URI, any password masked."""
        location = redact_uri(self.uri) if self.uri else "(default endpoint)"
        return f"{self.type} {location}"

    @classmethod
    def from_config(cls, config: KafscaleConfig) -> CatalogSettings:
        """The settings the validated config file names (`iceberg.*`, `s3.endpoint|region|path_style`)."""
        catalog = config.iceberg.catalog
        return cls(
            type=catalog.type,
            uri=catalog.uri,
            warehouse=config.iceberg.warehouse,
            name=catalog.name,
            token=catalog.token.get_secret_value(),
            username=catalog.username,
            password=catalog.password.get_secret_value(),
            s3_endpoint=config.s3.endpoint,
            s3_region=config.s3.region,
            s3_path_style=config.s3.path_style,
            properties=dict(catalog.properties),
            sigv4=catalog.sigv4,
            signing_name=catalog.signing_name,
            signing_region=catalog.signing_region,
            oauth2_server_uri=catalog.oauth2_server_uri,
            scope=catalog.scope,
        )


def redact_uri(uri: str) -> str:
    """The URI with the password of its user-info replaced by `***` (SQLAlchemy URLs carry one)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "(unparseable uri)"
    if parts.password is None:
        return uri
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}{port}"))


def catalog_properties(settings: CatalogSettings) -> dict[str, str]:
    """The pyiceberg catalog properties for `settings` (secrets included: never log the result)."""
    properties: dict[str, str] = {}
    if settings.uri:
        properties["uri"] = settings.uri
    if settings.warehouse:
        properties["warehouse"] = settings.warehouse
    if settings.type == "rest":
        properties.update(rest_auth_properties(settings))
    if settings.type == "glue":
        if settings.glue_endpoint:
            properties["glue.endpoint"] = settings.glue_endpoint
        if settings.s3_region:
            properties["glue.region"] = settings.s3_region
    # FileIO: where the warehouse, the run's data files and the table metadata are read and written.
    if settings.s3_endpoint:
        properties["s3.endpoint"] = settings.s3_endpoint
        # KafScale's s3.path_style: MinIO and moto need path-style; virtual-hosted otherwise.
        properties["s3.force-virtual-addressing"] = "false" if settings.s3_path_style else "true"
    if settings.s3_region:
        properties["s3.region"] = settings.s3_region
        properties["client.region"] = settings.s3_region
    # One PutObject per metadata file instead of a three-request multipart upload (`iceberg_io`).
    properties["py-io-impl"] = "kafscale_iceberg.adapters.iceberg_io.SinglePutFileIO"
    properties.update(settings.properties)
    return properties


def rest_auth_properties(settings: CatalogSettings) -> dict[str, str]:
    """How pyiceberg authenticates to a REST catalog: a bearer token, OAuth2 client credentials
    (`username:password`), or AWS SigV4 (credentials from the AWS default chain, or the
    `client.access-key-id`/`client.secret-access-key` properties). The server's `/v1/config` answer
    (its `prefix`, a `warehouse` override) is merged by pyiceberg when the catalog opens."""
    properties: dict[str, str] = {}
    if settings.token:
        properties["token"] = settings.token
    if settings.username:
        # The Go processor sends username:password as the OAuth2 client credential.
        properties["credential"] = f"{settings.username}:{settings.password}"
        # Where iceberg-go (and pyiceberg, deprecated) fetch the token by default, made explicit.
        properties["oauth2-server-uri"] = (
            settings.oauth2_server_uri or f"{settings.uri.rstrip('/')}/v1/oauth/tokens"
        )
        if settings.scope:
            properties["scope"] = settings.scope
    if settings.sigv4:
        properties["rest.sigv4-enabled"] = "true"
        properties["rest.signing-name"] = settings.signing_name or _signing_name(settings.uri)
        region = settings.signing_region or settings.s3_region
        if region:
            properties["rest.signing-region"] = region
    return properties


def _signing_name(uri: str) -> str:
    """The service a SigV4 catalog URI belongs to: `s3tables.…` S3 Tables, `glue.…` Glue, else API Gateway."""
    host = urlsplit(uri).hostname or ""
    if host.startswith("s3tables."):
        return "s3tables"
    if host.startswith("glue."):
        return "glue"
    return "execute-api"


def load_iceberg_catalog(settings: CatalogSettings) -> Catalog:
    """Open the catalog; REST contacts the server at once, SQL creates its tables when absent.

    Raises `ConfigError` when the catalog rejects the credentials or the URI is malformed,
    `CatalogUnavailableError` (transient) when it cannot be reached, `CatalogError` otherwise.
    """
    properties = catalog_properties(settings)
    glue_properties = _glue_properties(properties) if settings.type == "glue" else {}
    try:
        if settings.type == "sql":
            catalog: Catalog = SqlCatalog(settings.name, **properties)
        elif settings.type == "glue":
            catalog = GlueCatalog(settings.name, **glue_properties)
        else:
            catalog = RestCatalog(settings.name, **properties)
    except Exception as exc:
        raise translate_catalog_error(settings, "open the catalog", exc) from exc
    logger.info("iceberg catalog opened", extra={"catalog": settings.describe()})
    return catalog


def _glue_properties(properties: Mapping[str, str]) -> dict[str, Any]:
    """pyiceberg hands `glue.max-retries` to botocore's `Config` as it is, which needs an int (a string,
    as every config property is, failed to open the catalog)."""
    converted: dict[str, Any] = dict(properties)
    retries = converted.get("glue.max-retries")
    if retries is not None:
        try:
            converted["glue.max-retries"] = int(retries)
        except ValueError:
            raise ConfigError(
                "iceberg.catalog.properties.glue.max-retries", f"{retries!r} is not a whole number"
            ) from None
    return converted


def translate_catalog_error(settings: CatalogSettings, operation: str, exc: Exception) -> Exception:
    """The error of this package that stands for `exc`, raised by pyiceberg (or below it) in `operation`."""
    catalog = settings.describe()
    problem = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (UnauthorizedError, ForbiddenError, OAuthError, AuthorizationExpiredError)):
        if settings.sigv4:
            return ConfigError(
                "iceberg.catalog.sigv4",
                f"the {catalog} catalog rejected the SigV4-signed request ({problem}); check the AWS "
                "credentials (the role, or properties client.access-key-id/client.secret-access-key), "
                "signing_name and signing_region",
            )
        key = "iceberg.catalog.password" if settings.username else "iceberg.catalog.token"
        return ConfigError(key, f"the {catalog} catalog rejected the credentials ({problem})")
    if is_unreachable_error(exc):
        return CatalogUnavailableError(catalog, operation, problem)
    if named_in(exc, _BAD_URI):
        return ConfigError("iceberg.catalog.uri", f"{catalog}: {problem}")
    return CatalogError(catalog, operation, problem)


_BAD_URI: Mapping[str, frozenset[str]] = {
    "sqlalchemy": frozenset({"ArgumentError", "NoSuchModuleError"}),
    "requests": frozenset({"MissingSchema", "InvalidURL", "InvalidSchema"}),
}


def is_unreachable_error(exc: BaseException) -> bool:
    """True when `exc` means the catalog or its storage did not answer, or answered 5xx/429 or AWS
    throttling (a Glue `ThrottlingException`, an S3 `SlowDown` under the metadata): retry later."""
    unavailable = (ServerError, ServiceUnavailableError, TooManyRequestsError)
    return isinstance(exc, unavailable) or is_unreachable(exc)


def answered_internal_error(exc: BaseException) -> bool:
    """True when a REST catalog answered exactly 500 (pyiceberg's `ServerError` also stands for the
    502/504 of a gateway, which are outages); the HTTP error is the exception's cause."""
    response = getattr(exc.__cause__, "response", None)
    return isinstance(exc, ServerError) and getattr(response, "status_code", None) == 500


class CatalogTableAccess:
    """What the Iceberg adapters share: one catalog, tables loaded by name, foreign errors translated once.

    `describe` names the catalog in errors (type and URI, no secret).
    """

    def __init__(self, catalog: Catalog, *, describe: str = "") -> None:
        self._catalog = catalog
        self._describe = describe or f"{type(catalog).__name__} {catalog.name!r}"

    def _load(self, identifier: str) -> Table:
        """The table; raises `TableMissingError`, or the translated catalog error."""
        try:
            return self._catalog.load_table(identifier)
        except NoSuchTableError:
            raise TableMissingError(identifier) from None
        except Exception as exc:
            raise self._translate(f"load table {identifier!r}", exc) from exc

    def list_tables(self, namespace: str) -> tuple[str, ...]:
        """The tables of `namespace` as `namespace.table` identifiers (none when it does not exist).

        Raises `CatalogUnavailableError` or `CatalogError`."""
        try:
            listed = self._catalog.list_tables(namespace)
        except NoSuchNamespaceError:
            return ()
        except Exception as exc:
            raise self._translate(f"list the tables of namespace {namespace!r}", exc) from exc
        return tuple(sorted(".".join(identifier) for identifier in listed))

    def _translate(self, operation: str, exc: Exception) -> Exception:
        if isinstance(exc, (UnauthorizedError, ForbiddenError, OAuthError, AuthorizationExpiredError)):
            return ConfigError(
                "iceberg.catalog",
                f"the {self._describe} catalog refused to {operation} ({type(exc).__name__}: {exc}); check "
                "its credentials (token, username/password, or with sigv4 the AWS credentials, signing_name "
                "and signing_region) and what they may access",
            )
        if is_unreachable_error(exc):
            return CatalogUnavailableError(self._describe, operation, f"{type(exc).__name__}: {exc}")
        return CatalogError(self._describe, operation, f"{type(exc).__name__}: {exc}")
