"""The AWS box deployed with `CatalogType=s3tables`: every catalog call and table-data request it makes,
observed and checked against the S3 Tables actions of the calling role in template.yaml.

No S3 Tables service runs on this machine. SeaweedFS (`weed mini`, tests/support/seaweedfs.py) stands in
for it: its Iceberg REST catalog over a table bucket takes the place of
`https://s3tables.REGION.amazonaws.com/iceberg` (the config file names its URL as `iceberg.catalog.uri`;
everything else is the template's: `rest`, warehouse = `TableBucketArn`, SigV4 signed for `s3tables`),
and its table bucket holds the tables' files, refusing any other object as S3 Tables does.

What is observed, and how each request becomes IAM actions (`rest_iam_requests`, following AWS's
documented mapping of the endpoint's operations, docs/deploy.md "Amazon S3 Tables"):
- **REST catalog requests** of the functions and the EMR job's driver (pyiceberg's `requests`; the
  `HTTPAdapter.send` of this process is wrapped): attributed to the role running them; a request not
  signed with SigV4 for `s3tables` is recorded as `unsigned:…`, which no role allows.
- **Table data** (the run's data files, pyiceberg's manifests): S3 requests to the table bucket reach
  moto's endpoint like every other S3 request of the stack (the config's `s3.endpoint`; on AWS the
  bucket's own S3 endpoint) and are forwarded, re-signed with SeaweedFS's key, to SeaweedFS
  (`TableBucketFront`). Each is authorized as `s3tables:GetTableData` (GET, HEAD) or
  `s3tables:PutTableData` (PUT, POST, multipart) on the table; anything else (a listing, a delete) as
  `unsupported-in-table-bucket:…`, which no role allows, as S3 Tables refuses it. botocore's requests
  are attributed by the box's hook, the job's Python workers by their key, pyarrow's (pyiceberg's
  FileIO) by the function running then.
A table's ARN names its id on AWS (`…/table/ID`); here its namespace and name: the template grants
`${TableBucketArn}/table/*`, which matches either.

Not covered: S3 Tables' own authorization (SeaweedFS checks the signature, not the policy), table
policies, the maintenance API (`GetTableMaintenanceConfiguration`: SeaweedFS lacks it; its mapping is
checked when a box calls it), a real table bucket's `--table-s3` storage names.
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from kafscale_iceberg.local.seaweedfs import EmbeddedSeaweedFS
from tests.support.aws_box import EMR_JOB_ACCESS_KEY, PRINCIPAL_HEADER, CallRecorder, current_principal
from tests.support.seaweedfs import TableBucket

REST_SIGNATURE = "/s3tables/aws4_request"

# Iceberg REST paths (after `/v1/{prefix}`) -> the S3 Tables actions AWS authorizes for them.
_NAMESPACE_ACTIONS = {"GET": ["GetNamespace"], "HEAD": ["GetNamespace"], "DELETE": ["DeleteNamespace"]}
_TABLE_ACTIONS = {
    "GET": ["GetTable", "GetTableMetadataLocation", "GetTableData"],
    "HEAD": ["GetTable"],
    "POST": ["UpdateTableMetadataLocation", "PutTableData", "GetTableData"],
    "DELETE": ["DeleteTable"],
}


def rest_iam_requests(method: str, path: str, bucket_arn: str) -> list[tuple[str, str]]:
    """The (action, resource) pairs IAM authorizes for one Iceberg REST request to S3 Tables' endpoint
    (`path` from `/v1`); an operation this mapping does not know is `unmapped:…` (no role allows it)."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts == ["v1", "config"]:
        return [("s3tables:GetTableBucket", bucket_arn)]
    rest = parts[2:]  # after v1/{prefix}
    if rest == ["namespaces"]:
        action = {"GET": "ListNamespaces", "POST": "CreateNamespace"}.get(method)
        return [(f"s3tables:{action}", bucket_arn)] if action else _unmapped(method, path)
    if len(rest) == 2 and rest[0] == "namespaces":
        actions = _NAMESPACE_ACTIONS.get(method, [])
        return [(f"s3tables:{a}", bucket_arn) for a in actions] or _unmapped(method, path)
    if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "tables":
        if method == "GET":
            return [("s3tables:ListTables", bucket_arn)]
        if method == "POST":  # the new table's name is in the body: its ARN is not known yet
            return [("s3tables:CreateTable", bucket_arn), ("s3tables:PutTableData", f"{bucket_arn}/table/*")]
    if len(rest) == 4 and rest[0] == "namespaces" and rest[2] == "tables":
        table = f"{bucket_arn}/table/{rest[1]}.{rest[3]}"
        return [(f"s3tables:{a}", table) for a in _TABLE_ACTIONS.get(method, [])] or _unmapped(method, path)
    return _unmapped(method, path)


def _unmapped(method: str, path: str) -> list[tuple[str, str]]:
    return [(f"unmapped:s3tables-rest:{method}", path)]


def table_data_requests(found: Iterable[tuple[str, str]], buckets: dict[str, str]) -> list[tuple[str, str]]:
    """S3 (action, resource) pairs with those on a table bucket (`buckets`: name -> ARN) authorized as
    S3 Tables authorizes them: object reads GetTableData, writes PutTableData, on the table (the key's
    `namespace/table/…`); anything else is unsupported in a table bucket."""
    translated = []
    for action, resource in found:
        bucket, _, key = resource.removeprefix("arn:aws:s3:::").partition("/")
        arn = buckets.get(bucket) if resource.startswith("arn:aws:s3:::") else None
        if arn is None:
            translated.append((action, resource))
            continue
        parts = key.split("/")
        table = f"{arn}/table/{parts[0]}.{parts[1]}" if len(parts) > 2 else arn
        data_action = {
            "s3:GetObject": "s3tables:GetTableData",
            "s3:PutObject": "s3tables:PutTableData",
            "s3:AbortMultipartUpload": "s3tables:PutTableData",
        }.get(action, f"unsupported-in-table-bucket:{action}")
        translated.append((data_action, table))
    return translated


@dataclass
class RestCall:
    """One REST catalog request a role made (for tests to read: what was called, and its answer)."""

    role: str
    method: str
    path: str
    status: int


@dataclass
class S3TablesStandIn:
    """SeaweedFS's table bucket and REST catalog in S3 Tables' place, wired into one box."""

    server: EmbeddedSeaweedFS
    bucket: TableBucket
    rest_calls: list[RestCall] = field(default_factory=list)
    forwarded: int = 0
    """S3 requests `TableBucketFront` forwarded to SeaweedFS."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def parameters(self) -> dict[str, str]:
        """The template's parameters of an S3 Tables deployment on this bucket."""
        return {"CatalogType": "s3tables", "TableBucketArn": self.bucket.arn}

    def iceberg_config(self) -> dict[str, Any]:
        """The config file's `iceberg` section: the stand-in's URL (S3 Tables' is derived from the
        ARN) and the key SigV4 signs with (on AWS, the role's credentials from the default chain)."""
        return {
            "catalog": {
                "type": "rest",
                "uri": self.server.iceberg_url,
                "properties": {
                    "client.access-key-id": self.server.access_key,
                    "client.secret-access-key": self.server.secret_key,
                },
            },
            "warehouse": self.bucket.arn,
        }

    def catalog(self) -> Any:
        """The tables as a reader outside the stack sees them (the harness's calls: not recorded)."""
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog("s3tables-box", **self.bucket.catalog_properties("sigv4"))

    def install(self, monkeypatch: pytest.MonkeyPatch, recorder: CallRecorder) -> None:
        """Observe the REST calls, translate the table bucket's S3 requests, forward them to SeaweedFS."""
        buckets = {self.bucket.name: self.bucket.arn}
        monkeypatch.setattr(recorder, "rewrite", lambda found: table_data_requests(found, buckets))
        recorder.forwards.append(TableBucketFront(self, recorder))
        original_send = requests.adapters.HTTPAdapter.send

        def send(adapter: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            answer = original_send(adapter, request, *args, **kwargs)  # signs it first (add_headers)
            if str(request.url).startswith(self.server.iceberg_url):
                self._record_rest(recorder, request, answer.status_code)
            return answer

        monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", send)

    def _record_rest(self, recorder: CallRecorder, request: Any, status: int) -> None:
        role = current_principal()
        if role is None:  # the harness's own reads
            return
        path = urlsplit(str(request.url)).path
        found = rest_iam_requests(str(request.method), path, self.bucket.arn)
        if REST_SIGNATURE not in str(request.headers.get("Authorization", "")):
            found = [(f"unsigned:{action}", resource) for action, resource in found]
        with self._lock:
            self.rest_calls.append(RestCall(role, str(request.method), path, status))
        recorder.record_requests(role, f"s3tables-rest:{request.method}", found)


class TableBucketFront:
    """moto's WSGI entry for the table bucket: its S3 requests go to SeaweedFS, re-signed with its key
    (each is recorded first: botocore's by the box's hook, the workers' by `server_hook`, pyarrow's
    here, for the function running then)."""

    def __init__(self, stand_in: S3TablesStandIn, recorder: CallRecorder) -> None:
        self.stand_in = stand_in
        self.recorder = recorder
        self.prefix = f"/{stand_in.bucket.name}"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes] | None:
        from tests.support.aws_box import s3_rest_requests

        path = str(environ.get("PATH_INFO", ""))
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            return None
        body = _body(environ)
        method, query = str(environ["REQUEST_METHOD"]), str(environ.get("QUERY_STRING", ""))
        authorization = str(environ.get("HTTP_AUTHORIZATION", ""))
        botocore_call = environ.get("HTTP_" + PRINCIPAL_HEADER.upper().replace("-", "_"))
        if botocore_call is None and f"Credential={EMR_JOB_ACCESS_KEY}/" not in authorization:
            role = self.recorder.active_role()
            if role is not None:
                self.recorder.record_requests(role, "s3:REST", s3_rest_requests(method, path, query, body))
        answer = self._forward(environ, method, path, query, body)
        with self.stand_in._lock:
            self.stand_in.forwarded += 1
        dropped = {"connection", "transfer-encoding", "content-encoding", "keep-alive"}
        headers = [(k, v) for k, v in answer.headers.items() if k.lower() not in dropped]
        start_response(f"{answer.status_code} {answer.reason}", headers)
        return [answer.content]

    def _forward(self, environ: dict[str, Any], method: str, path: str, query: str, body: bytes) -> Any:
        server = self.stand_in.server
        kept = {"content-type", "content-md5", "range", "if-match", "if-none-match", "x-amz-copy-source"}
        headers = {}
        for name, value in environ.items():
            if name.startswith("HTTP_") or name == "CONTENT_TYPE":
                header = name.removeprefix("HTTP_").replace("_", "-").lower()
                if header in kept or header.startswith(("x-amz-meta-", "x-amz-checksum-")):
                    headers[header] = str(value)
        url = f"{server.s3_url}{path}" + (f"?{query}" if query else "")
        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        request.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        SigV4Auth(Credentials(server.access_key, server.secret_key), "s3", server.region).add_auth(request)
        return requests.request(
            method, url, data=body, headers=dict(request.headers.items()), allow_redirects=False, timeout=60
        )


def _body(environ: dict[str, Any]) -> bytes:
    """The request's payload, with an `aws-chunked` encoding (a streaming signature) undone."""
    stream = environ["wsgi.input"]
    length = environ.get("CONTENT_LENGTH")
    if length:
        body: bytes = stream.read(int(length))
    else:  # a chunked transfer ends itself; without a length or one there is no payload (a GET, a HEAD)
        body = stream.read() if environ.get("wsgi.input_terminated") else b""
    environ["wsgi.input"] = io.BytesIO(body)
    encoding = f"{environ.get('HTTP_CONTENT_ENCODING', '')} {environ.get('HTTP_X_AMZ_CONTENT_SHA256', '')}"
    if "aws-chunked" not in encoding and "STREAMING" not in encoding:
        return body
    decoded, rest = b"", body
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(re.split(rb"[;\s]", size_line, maxsplit=1)[0], 16)
        if size == 0:
            return decoded
        decoded, rest = decoded + rest[:size], rest[size + 2 :]
