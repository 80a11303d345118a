"""Quick probes of the dependencies `run`, `status`, `replay` and `maintain` use, before any JVM or run.

Each probe answers within a few seconds (short connect and read timeouts, one attempt) with the
problem in words, or None when the dependency answers. None of them opens a gRPC channel: etcd is
asked over its HTTP `/version` endpoint, so a JVM forked afterwards never forks gRPC's threads.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.adapters.s3_segments import S3Settings

PROBE_TIMEOUT_S = 4.0


def probe_bucket(settings: S3Settings, bucket: str, prefix: str) -> str | None:
    """None when `bucket` exists and a listing under `prefix` is allowed; else what went wrong."""
    client = boto3.client(
        "s3",
        endpoint_url=settings.endpoint_url or None,
        region_name=settings.region or None,
        config=Config(
            s3={"addressing_style": "path" if settings.path_style else "auto"},
            connect_timeout=PROBE_TIMEOUT_S,
            read_timeout=PROBE_TIMEOUT_S,
            retries={"mode": "standard", "max_attempts": 1},
        ),
    )
    try:
        client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in {"NoSuchBucket", "404"}:
            return f"bucket {bucket!r} does not exist"
        if code in {"AccessDenied", "403", "AllAccessDisabled"}:
            return f"bucket {bucket!r} cannot be listed under {prefix!r} with these credentials ({code})"
        return f"bucket {bucket!r} answered {code}: {exc}"
    except BotoCoreError as exc:
        return f"S3 did not answer ({exc})"
    return None


def probe_etcd(endpoint: str, *, ca_file: str = "", cert_file: str = "", key_file: str = "") -> str | None:
    """None when an etcd server answers `GET /version` at `endpoint` (`host:port` or a URL)."""
    tls = bool(ca_file or cert_file) or endpoint.startswith("https://")
    base = endpoint if "://" in endpoint else f"{'https' if tls else 'http'}://{endpoint}"
    context = None
    if base.startswith("https://"):
        context = ssl.create_default_context(cafile=ca_file or None)
        if cert_file:
            context.load_cert_chain(cert_file, key_file or None)
    try:
        with urllib.request.urlopen(
            f"{base.rstrip('/')}/version", timeout=PROBE_TIMEOUT_S, context=context
        ) as response:
            body = json.loads(response.read() or b"{}")
    except (OSError, ValueError) as exc:
        return f"no etcd answers at {base} ({_reason(exc)})"
    if not isinstance(body, dict) or "etcdserver" not in body:
        return f"{base} answers, but not as etcd (GET /version gave {str(body)[:80]!r})"
    return None


def probe_http(url: str) -> str | None:
    """None when `url` answers HTTP at all (any status below 500: the server is there)."""
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as exc:
        return None if exc.code < 500 else f"{url} answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return f"nothing answers at {url} ({_reason(exc)})"


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc)
