"""AWS in a box: the deployed shape of template.yaml run on this machine, for tests/test_aws_*.py.

What is real: the state machine (`infra/state_machine.asl.json` with the template's
`DefinitionSubstitutions`) executed by moto's ASL interpreter (the vendored LocalStack one, moto
5.2.5 server mode with `stepfunctions.execute_state_machine`); S3, SQS (FIFO groups, redrive), Glue,
EMR Serverless's API and Step Functions' API (moto server); etcd (a real server); the Iceberg
commit (pyiceberg, Glue catalog, warehouse on S3); the Spark job (`spark_app.job.run_job`, local Spark); every
handler of `functions/` with the environment template.yaml gives it.

The fakes, each with what it does not cover:
- **Lambda invoke** (`LambdaFleet`): moto's interpreter calls `lambda_eval_utils._invoke_lambda_function`;
  it is replaced to run the project's handler in this process under Lambda's contract (event and
  context in; an exception becomes `FunctionError: Unhandled` with `errorType` = its class name and
  `errorMessage`; 6 MB request/response limits; a function over its template `Timeout` reports
  `Sandbox.Timedout`). Faults end an invocation as Lambda does when it kills one: before the handler
  runs (`timed_out`, `out_of_memory`: `Sandbox.Timedout`, `Runtime.OutOfMemory`) or after it did all
  its work and wrote its documents (`killed_after`: the answer is lost, the error reported instead).
  A call from a thread pool's thread runs in the context of the code that submitted it (the box's
  `ThreadPoolExecutor.submit` carries it, as Python does not), so the Lambda runner's task threads and
  boto3's transfer threads are attributed to the function that started them. A function's
  asynchronous `Invoke` (`InvocationType=Event`) is answered 202 and run by the next `pump`. Not
  covered: cold-start latency, concurrency limits, memory limits (an out-of-memory kill is the fault
  above, not measured use), the layer/image packaging (tests/test_template_tools.py builds those).
  One invocation runs at a time.
- **`emr-serverless:startJobRun.sync`** (`emr_serverless_sync_service`): moto's interpreter has no
  EMR Serverless integration; the box's starts the job run and reads it with `GetJobRun` until it
  is final (Step Functions learns the end from EventBridge). Its calls are the state machine role's.
  moto's Parallel could not re-raise a branch's `States.*` error (a failed job): the box lets it, as
  Step Functions does. Not covered: the EventBridge rule Step Functions manages (its IAM is checked
  by tests/test_serverless_fixes.py).
- **Event source mappings** (`EventSourceMappings`): a poller that reads the template's SQS event
  sources with their `BatchSize` and hands batches to the function: a raised error returns the
  whole batch, `batchItemFailures` only those items, the rest are deleted; redrive to the DLQ after
  `maxReceiveCount` is moto's. `pump(pollers=N)` runs N pollers per source at once and records the
  FIFO groups in flight (`overlaps`, `violations`): moto's FIFO queue hands a group to one poller at
  a time. Invocations themselves run one at a time (the environment is process-wide). `redrive`
  does what `StartMessageMoveTask` does (DLQ -> source, same body and group; a new deduplication id).
  Not covered: batching windows, scaling, `MaximumConcurrency`.
- **Time**: Wait states and Retry intervals run `TIME_SCALE` times their length; queue visibility
  timeouts are `VISIBILITY_SECONDS` instead of the template's 180/720 s; an EMR job's
  `executionTimeoutMinutes` counts `JOB_TIMEOUT_SCALE` minutes, for stuck jobs only (a real local
  Spark run's speed on a shared machine says nothing about EMR's, so it is never timed out).
- **EMR Serverless compute**: moto's `StartJobRun` is idempotent by `clientToken` here (as EMR is)
  and starts the job's `--plan` (or a maintenance pass's `--compaction` job) on local Spark
  (`LocalSparkJobRunner`, warm session: the same `spark_app` code EMR runs);
  `GetJobRun` and `ListJobRuns` report that job's state; `CancelJobRun` cancels it (a finished job:
  ValidationException).
  `faults` makes the next job FAILED without running (a container that died), stuck, or slow to
  start (`SLOW`: RUNNING for `SLOW_START_SECONDS` first, so the renewal branch runs).
  Not covered: EMR's queueing, capacity, the venv archive/image (`make package-spark`).
- **Catalog**: the template's (`CatalogType` glue, the warehouse in `WarehouseBucket`) on moto's Glue
  and S3; the config file only points pyiceberg's Glue client at moto (`glue.endpoint`). Every
  boto3 session made during a test records (pyiceberg's Glue client makes its own), so the commit's
  Glue calls are checked against its role. Not covered: the REST catalog; Glue's optimistic
  `UpdateTable` conflicts as AWS raises them; pyiceberg's own S3 reads/writes of table metadata in
  the functions (pyarrow, not boto3: unattributed, so unchecked).
- **IAM** (`CallRecorder`): every AWS call a function makes (botocore `before-call` on the default
  session, attributed to the function being invoked) and each call of the state machine (its SQS
  sends, its Lambda invokes, its EMR calls) is checked against that role in template.yaml with
  tests/support/cfn_template.py's evaluator (Allow statements; conditions not evaluated). The EMR
  job's own calls are checked against EmrJobRole: its driver's (the local runner's job thread) by the
  same hook, its Python workers' (other processes) where moto receives them, by the access key
  they sign with (`EMR_JOB_ACCESS_KEY`, given through the SparkContext's worker environment).
  The job's data files are written to the warehouse bucket by its workers, so those writes are
  checked too, and so are their Glue Schema Registry reads (`GetSchemaVersion`: by schema version id
  authorized on `*`, by schema name on its registry and schema: `glue_schema_version_requests`).
  Not covered: threads the driver starts itself (unattributed, so unchecked).
"""

from __future__ import annotations

import contextvars
import functools
import io
import json
import os
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody

from tests.support.cfn_template import ACCOUNT, REGION, ROOT, Deployment, Function, functions
from tests.support.lambdas import LambdaContext

TIME_SCALE = 0.01
JOB_TIMEOUT_SCALE = 0.01  # 5 min (EMR's minimum) -> 3 s
VISIBILITY_SECONDS = 1
SLOW_START_SECONDS = 5.0  # a "SLOW" EMR job: longer than two lease renewals (180 s x TIME_SCALE)
PAYLOAD_LIMIT = 6 * 1024 * 1024
TEMPLATE_APPLICATION_ID = "00fabcdefg123456"

_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar("aws_box_principal", default=None)
STATE_MACHINE_ROLE = "RunStateMachineRole"
PRINCIPAL_HEADER = "x-aws-box-principal"  # the box's own: which role made a botocore request
UNATTRIBUTED = "unattributed"
SPARK_JOB_THREAD = "kafscale-spark"  # LocalSparkJobRunner's job thread: the EMR job's driver


# -- IAM ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One AWS request as IAM sees it."""

    role: str
    action: str
    resource: str


def _queue_arn(url: str) -> str:
    account, name = url.rstrip("/").split("/")[-2:]
    return f"arn:aws:sqs:{REGION}:{account}:{name}"


def iam_requests(service: str, operation: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    """The (action, resource) pairs IAM authorizes for one API call; unknown calls raise."""
    if service == "s3":
        bucket = params.get("Bucket", "")
        key = params.get("Key", "")
        obj = f"arn:aws:s3:::{bucket}/{key}"
        by_op = {
            "GetObject": ("s3:GetObject", obj),
            "HeadObject": ("s3:GetObject", obj),
            "PutObject": ("s3:PutObject", obj),
            "CreateMultipartUpload": ("s3:PutObject", obj),
            "UploadPart": ("s3:PutObject", obj),
            "CompleteMultipartUpload": ("s3:PutObject", obj),
            "AbortMultipartUpload": ("s3:AbortMultipartUpload", obj),
            "DeleteObject": ("s3:DeleteObject", obj),
            "ListObjectsV2": ("s3:ListBucket", f"arn:aws:s3:::{bucket}"),
            "ListObjects": ("s3:ListBucket", f"arn:aws:s3:::{bucket}"),
        }
        if operation == "DeleteObjects":
            return [
                ("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{o['Key']}") for o in params["Delete"]["Objects"]
            ]
        return [by_op[operation]]
    if service == "sqs":
        action = {
            "SendMessageBatch": "SendMessage",
            "DeleteMessageBatch": "DeleteMessage",
            "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
        }.get(operation, operation)
        if "QueueUrl" not in params:
            return [(f"sqs:{action}", f"arn:aws:sqs:{REGION}:{ACCOUNT}:{params.get('QueueName', '')}")]
        return [(f"sqs:{action}", _queue_arn(params["QueueUrl"]))]
    if service == "states":
        resource = params.get("stateMachineArn") or params["executionArn"]
        return [(f"states:{operation}", resource)]
    if service == "emr-serverless":
        application = f"arn:aws:emr-serverless:{REGION}:{ACCOUNT}:/applications/{params['applicationId']}"
        if operation == "StartJobRun":
            found = [
                ("emr-serverless:StartJobRun", application),
                ("iam:PassRole", params["executionRoleArn"]),
            ]
            if params.get("tags"):
                found.append(("emr-serverless:TagResource", f"{application}/jobruns/*"))
            return found
        if operation == "ListJobRuns":
            return [("emr-serverless:ListJobRuns", application)]
        return [(f"emr-serverless:{operation}", f"{application}/jobruns/{params['jobRunId']}")]
    if service == "glue" and operation == "GetSchemaVersion":
        return glue_schema_version_requests(params)
    if service == "glue":
        catalog = f"arn:aws:glue:{REGION}:{ACCOUNT}:catalog"
        database = (
            params.get("DatabaseName")
            or params.get("DatabaseInput", {}).get("Name")
            or (params.get("Name", "") if "Database" in operation else "")
        )
        found = [
            (f"glue:{operation}", catalog),
            (f"glue:{operation}", f"arn:aws:glue:{REGION}:{ACCOUNT}:database/{database}"),
        ]
        table = params.get("Name") or params.get("TableInput", {}).get("Name")
        if operation.endswith("Table") or operation == "GetTables":
            found.append(
                (f"glue:{operation}", f"arn:aws:glue:{REGION}:{ACCOUNT}:table/{database}/{table or '*'}")
            )
        return found
    if service == "secretsmanager":
        return [(f"secretsmanager:{operation}", params["SecretId"])]
    if service == "lambda" and operation == "Invoke":
        return [("lambda:InvokeFunction", params["FunctionName"])]
    if service == "s3tables":  # the S3 Tables API (its Iceberg REST endpoint: tests/support/s3tables_box.py)
        bucket = params.get("tableBucketARN") or params["arn"]
        table = f"{bucket}/table/{params['namespace']}.{params['name']}" if "name" in params else bucket
        return [(f"s3tables:{operation}", table)]
    raise AssertionError(f"the IAM recorder does not know {service}:{operation}: teach iam_requests")


def current_principal() -> str | None:
    """The role of the code running in this thread: the function being invoked, or the EMR job's driver."""
    role = _principal.get()
    if role is None and threading.current_thread().name.startswith(SPARK_JOB_THREAD):
        role = EMR_JOB_ROLE
    return role


def glue_schema_version_requests(params: dict[str, Any]) -> list[tuple[str, str]]:
    """What IAM authorizes for `GetSchemaVersion`. By `SchemaId` (a schema's latest or numbered
    version): the registry and the schema it names. By `SchemaVersionId` alone (what a record's header
    gives): `*`, as on AWS, where that request names no registry and only `Resource: "*"` allows it
    (AWS's deserializer policy, Glue developer guide "Getting started with schema registry", code
    example 15; awslabs/aws-glue-schema-registry issues #68 and #151: docs/deploy.md)."""
    schema_id = params.get("SchemaId")
    if not schema_id:
        return [("glue:GetSchemaVersion", "*")]
    registry, schema = schema_id["RegistryName"], schema_id["SchemaName"]
    return [
        ("glue:GetSchemaVersion", f"arn:aws:glue:{REGION}:{ACCOUNT}:registry/{registry}"),
        ("glue:GetSchemaVersion", f"arn:aws:glue:{REGION}:{ACCOUNT}:schema/{registry}/{schema}"),
    ]


EMR_JOB_ROLE = "EmrJobRole"
EMR_JOB_ACCESS_KEY = "EMRJOBROLEBOXKEY"  # the job's Python workers sign with it (see EmrCompute)


def s3_rest_requests(method: str, path: str, query: str, body: bytes) -> list[tuple[str, str]]:
    """The (action, resource) pairs IAM authorizes for one path-style S3 REST request."""
    from urllib.parse import parse_qs, unquote

    bucket, _, key = unquote(path).lstrip("/").partition("/")
    params = parse_qs(query, keep_blank_values=True)
    if not key:
        if method == "GET":
            return [("s3:ListBucket", f"arn:aws:s3:::{bucket}")]
        if method == "POST" and "delete" in params:  # DeleteObjects: one DeleteObject per key
            import re

            keys = re.findall(rb"<Key>(.*?)</Key>", body)
            return [("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{k.decode()}") for k in keys]
        return [(f"unmapped:s3:{method} bucket", f"arn:aws:s3:::{bucket}")]
    obj = f"arn:aws:s3:::{bucket}/{key}"
    if method in {"GET", "HEAD"}:
        return [("s3:GetObject", obj)]
    if method in {"PUT", "POST"}:
        return [("s3:PutObject", obj)]
    if method == "DELETE":
        return [("s3:AbortMultipartUpload" if "uploadId" in params else "s3:DeleteObject", obj)]
    return [(f"unmapped:s3:{method}", obj)]


def s3_price_class(method: str, path: str, query: str) -> str:
    """How S3 bills a path-style REST request: `GET` (GET, HEAD), `PUT` (PUT, POST, COPY), `LIST`
    (a bucket's GET), or `DELETE` (free)."""
    _bucket, _, key = path.lstrip("/").partition("/")
    if method == "DELETE" or (method == "POST" and "delete" in query.split("&")):
        return "DELETE"
    if method in {"GET", "HEAD"}:
        return "GET" if key else "LIST"
    return "PUT"


class CallRecorder:
    """Records every AWS call of the box's functions and state machine (see the module docstring)."""

    def __init__(self, deployment: Deployment, renames: dict[str, str]) -> None:
        self.deployment = deployment
        self.renames = renames  # moto's ids -> the template's (the EMR application id)
        self.calls: list[Call] = []
        self.worker_requests = 0  # requests of the EMR job's Python workers (server_hook)
        # Requests as AWS bills them (one per API call, whatever IAM authorizes per item):
        # `service:Operation` of every recorded call, the event sources' receives and deletes included.
        self.requests: Counter[str] = Counter()
        # Every S3 request moto received, by price class (`s3_price_class`), whoever signed it (the
        # harness's own too: read it around `Box.pump`, during which only the stack touches S3). It
        # includes what no botocore hook sees: pyiceberg's table metadata through pyarrow, the job's
        # Python workers.
        self.s3_requests_seen: Counter[str] = Counter()
        # The same requests by (role, price class): a botocore call's principal (the `PRINCIPAL_HEADER`
        # its `before-call` hook adds), the EMR job's workers by their key, anything else (pyiceberg's
        # pyarrow requests) the role of the function being invoked then (`active_role`), else
        # `UNATTRIBUTED` (the harness's own calls).
        self.s3_requests_by_role: Counter[tuple[str, str]] = Counter()
        self.active_role: Callable[[], str | None] = lambda: None
        # A catalog stand-in's (tests/support/s3tables_box.py): how IAM sees its buckets' requests, and
        # WSGI apps answering some requests moto receives instead of moto (None: not theirs).
        self.rewrite: Callable[[list[tuple[str, str]]], list[tuple[str, str]]] = lambda found: found
        self.forwards: list[Callable[[dict[str, Any], Callable[..., Any]], list[bytes] | None]] = []
        self._lock = threading.Lock()

    def keep_params(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        """`before-parameter-build`: the API parameters (`before-call` only sees the serialized request)."""
        context["aws_box_params"] = dict(params)

    def hook(
        self,
        model: Any,
        context: dict[str, Any],
        request_signer: Any = None,
        params: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        """`before-call`: record the call for the function being invoked (or the state machine, or
        the EMR job's driver: the local Spark runner's job thread), and name its principal in a
        header of the request (`server_hook` attributes S3 requests by it)."""
        request = params if params is not None else {}
        params = context.get("aws_box_params", {})
        role = current_principal()
        if role is None:
            credentials = getattr(request_signer, "_credentials", None)
            if getattr(credentials, "access_key", None) != "ak":  # moto's interpreter signs with "ak"
                return
            role = STATE_MACHINE_ROLE
        request.setdefault("headers", {})[PRINCIPAL_HEADER] = role
        service = model.service_model.endpoint_prefix
        if service == "elasticmapreduce" or model.service_model.signing_name == "emr-serverless":
            service = "emr-serverless"
        self.record(role, service, model.name, params)

    def record(self, role: str, service: str, operation: str, params: dict[str, Any]) -> None:
        try:
            requests = iam_requests(service, operation, params)
        except (AssertionError, KeyError) as exc:  # reported by denied(), never raised into a handler
            requests = [(f"unmapped:{service}:{operation}", repr(exc))]
        self.record_requests(role, f"{service}:{operation}", requests)

    def record_requests(self, role: str, request: str, found: list[tuple[str, str]]) -> None:
        """One request (`service:Operation`) of `role`, authorized as the (action, resource) pairs `found`."""
        with self._lock:
            self.requests[request] += 1
        for action, raw in self.rewrite(found):
            resource = raw
            for moto_id, template_id in self.renames.items():
                resource = resource.replace(moto_id, template_id)
            with self._lock:
                self.calls.append(Call(role, action, resource))

    def server_hook(self, environ: dict[str, Any]) -> None:
        """moto's WSGI entry: record the requests the EMR job's Python workers sign with
        `EMR_JOB_ACCESS_KEY` (another process: no botocore hook reaches it)."""
        import io

        authorization = environ.get("HTTP_AUTHORIZATION", "")
        if "/s3/aws4_request" in authorization:
            method, path = str(environ.get("REQUEST_METHOD")), environ.get("PATH_INFO", "")
            kind = s3_price_class(method, path, environ.get("QUERY_STRING", ""))
            role = environ.get("HTTP_" + PRINCIPAL_HEADER.upper().replace("-", "_"))
            if role is None and f"Credential={EMR_JOB_ACCESS_KEY}/" in authorization:
                role = EMR_JOB_ROLE
            role = role or self.active_role() or UNATTRIBUTED
            with self._lock:
                self.s3_requests_seen[kind] += 1
                self.s3_requests_by_role[role, kind] += 1
        if f"Credential={EMR_JOB_ACCESS_KEY}/" not in authorization:
            return
        service = authorization.split("Credential=", 1)[1].split(",", 1)[0].split("/")[3]
        body = b""
        if environ.get("REQUEST_METHOD") == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(body)
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        if service == "glue" and target.startswith("AWSGlue."):  # a JSON API call: its body names it
            found = iam_requests("glue", target.removeprefix("AWSGlue."), json.loads(body or b"{}"))
        elif service != "s3":
            found = [(f"unmapped:{service}", environ.get("PATH_INFO", ""))]
        else:
            found = s3_rest_requests(
                environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""), body
            )
        with self._lock:
            self.calls.extend(Call(EMR_JOB_ROLE, action, raw) for action, raw in self.rewrite(found))
            self.worker_requests += 1

    def denied(self) -> list[Call]:
        """The recorded calls the role in template.yaml would refuse."""
        return sorted(
            {c for c in self.calls if not self.deployment.role_allows(c.role, c.action, c.resource)},
            key=lambda c: (c.role, c.action, c.resource),
        )

    def count(self, action: str, role: str | None = None) -> int:
        return sum(1 for c in self.calls if c.action == action and (role is None or c.role == role))


# -- Lambda -------------------------------------------------------------------------------------------


class LambdaTimeoutError(Exception):
    """A fault: the invocation ran past the function's timeout (Lambda kills it; nothing returned)."""


class LambdaOutOfMemoryError(Exception):
    """A fault: the invocation ran out of memory (Lambda kills it; nothing returned)."""


_KILLED = {LambdaTimeoutError: "Sandbox.Timedout", LambdaOutOfMemoryError: "Runtime.OutOfMemory"}


@dataclass
class Invocation:
    function: str
    seconds: float
    error: str | None


class LambdaFleet:
    """The template's functions, invoked in this process under Lambda's contract."""

    def __init__(self, deployment: Deployment, environment: dict[str, dict[str, str]]) -> None:
        self.deployment = deployment
        self.functions = {f.logical_id: f for f in functions()}
        self.environment = environment
        self.by_name: dict[str, str] = {}
        for function in self.functions.values():
            self.by_name[deployment.attribute(function.logical_id, "Arn")] = function.logical_id
            self.by_name[deployment.attribute(function.logical_id, "Ref")] = function.logical_id
        # logical id -> faults to apply to its next invocations (callables raising, or None to run)
        self.faults: dict[str, list[Callable[[], None]]] = {}
        # logical id -> faults to raise after its next invocations did their work (answer lost)
        self.killed_after: dict[str, list[Callable[[], None]]] = {}
        self.invocations: list[Invocation] = []
        self.active_role: str | None = None
        """The role of the invocation running now (one runs at a time)."""
        self._lock = threading.RLock()

    def handler(self, function: Function) -> Callable[[dict[str, Any], Any], Any]:
        import importlib

        module, name = function.handler.rsplit(".", 1)
        handler: Callable[[dict[str, Any], Any], Any] = getattr(importlib.import_module(module), name)
        return handler

    def invoke(self, logical_id: str, event: dict[str, Any]) -> Any:
        """Call the function's handler with its environment; raises what it raises."""
        function = self.functions[logical_id]
        timeout = float(function.properties.get("Timeout", 3))
        with self._lock:
            saved = dict(os.environ)
            os.environ.update(self.environment[logical_id])
            token = _principal.set(function.role_id)
            caller_role = self.active_role  # a synchronous invocation from a function's: its caller's
            self.active_role = function.role_id
            started = time.perf_counter()
            error: str | None = None
            try:
                from functions import runtime

                if caller_role is None:  # a nested invocation leaves its caller's dependencies be
                    runtime.assembly.cache_clear()
                for fault in self.faults.get(logical_id, [])[:1]:
                    self.faults[logical_id].pop(0)
                    fault()
                context = LambdaContext(
                    function_name=str(self.deployment.attribute(logical_id, "Ref")),
                    memory_limit_in_mb=int(function.properties.get("MemorySize", 128)),
                    timeout_s=timeout,
                )
                result = self.handler(function)(event, context)
                for fault in self.killed_after.get(logical_id, [])[:1]:
                    self.killed_after[logical_id].pop(0)
                    fault()
                if time.perf_counter() - started > timeout:
                    raise LambdaTimeoutError(f"{logical_id} ran past its {timeout:.0f} s timeout")
                return result
            except BaseException as exc:
                error = f"{type(exc).__name__}: {exc}"[-600:]
                raise
            finally:
                self.invocations.append(Invocation(logical_id, time.perf_counter() - started, error))
                _principal.reset(token)
                self.active_role = caller_role
                os.environ.clear()
                os.environ.update(saved)

    def invoke_payload(self, function_name: str, payload: bytes) -> dict[str, Any]:
        """Lambda's `Invoke` (RequestResponse) as Step Functions sees it: payload out, or the error."""
        if len(payload) > PAYLOAD_LIMIT:
            from botocore.exceptions import ClientError

            raise ClientError(
                {
                    "Error": {"Code": "RequestEntityTooLargeException", "Message": "Request must be smaller"},
                    "ResponseMetadata": {"HTTPStatusCode": 413, "RequestId": uuid.uuid4().hex},
                },
                "Invoke",
            )
        logical_id = self.by_name[function_name]
        try:
            result = self.invoke(logical_id, json.loads(payload or b"{}"))
        except (LambdaTimeoutError, LambdaOutOfMemoryError) as exc:
            return _function_error(_KILLED[type(exc)], str(exc))
        except Exception as exc:  # Lambda reports any exception the same way
            return _function_error(type(exc).__name__, str(exc), traceback.format_exception(exc))
        body = json.dumps(result)
        if len(body.encode()) > PAYLOAD_LIMIT:
            return _function_error("Function.ResponseSizeTooLarge", f"response of {len(body)} bytes")
        return {"StatusCode": 200, "Payload": json.loads(body), "ExecutedVersion": "$LATEST"}

    def count(self, logical_id: str) -> int:
        return sum(1 for i in self.invocations if i.function == logical_id)


def _function_error(error_type: str, message: str, trace: list[str] | None = None) -> dict[str, Any]:
    payload = {"errorType": error_type, "errorMessage": message, "trace": trace or []}
    return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": payload, "ExecutedVersion": "$LATEST"}


def timed_out() -> None:
    """A fault for `LambdaFleet.faults` (or `killed_after`): the invocation times out."""
    raise LambdaTimeoutError("the function timed out (fault)")


def out_of_memory() -> None:
    """A fault for `LambdaFleet.faults` (or `killed_after`): the invocation runs out of memory."""
    raise LambdaOutOfMemoryError("Runtime exited with error: signal: killed (fault: out of memory)")


# -- SQS event sources ----------------------------------------------------------------------------------


@dataclass
class EventSource:
    function: str
    queue_url: str
    queue_arn: str
    batch_size: int
    role: str


SQS_RECEIVE_MAX = 10
"""Messages one `ReceiveMessage` returns at most: a larger batch takes several (as Lambda's poller does)."""


class EventSourceMappings:
    """Lambda's SQS pollers for the template's `Type: SQS` events (see the module docstring).

    Their receives and deletes are recorded as the function's role's calls (Lambda polls with the
    function's execution role); empty receives are not (on AWS they are the pollers' idle cost,
    which depends on time, not on the work: bench/cost.py counts them per month). `first_deliveries`
    counts each queue's messages received for the first time: for the segment events queue, the S3
    notifications sent to it.
    """

    def __init__(
        self, fleet: LambdaFleet, sqs: Any, sources: list[EventSource], recorder: CallRecorder | None = None
    ) -> None:
        self.fleet = fleet
        self.sqs = sqs
        self.sources = sources
        self.recorder = recorder
        self.first_deliveries: Counter[str] = Counter()
        # FIFO message groups of the batches handed out and not yet settled, per queue; a batch
        # received while another group of its queue is in flight is an overlap (two pollers busy at
        # once), one whose group is already in flight a violation of "one batch per group".
        self.in_flight: dict[str, Counter[str]] = {s.queue_url: Counter() for s in sources}
        self.overlaps: list[tuple[str, str]] = []
        self.violations: list[str] = []
        self._lock = threading.Lock()

    def poll_once(self) -> int:
        """One receive per event source and one invocation per non-empty batch; messages handed out."""
        return sum(self.poll_source(source) for source in self.sources)

    def poll_concurrently(self, pollers: int) -> int:
        """`pollers` pollers per event source at once (Lambda scales an SQS event source's pollers),
        each one receive and one invocation; messages handed out."""
        handed: list[int] = []
        threads = [
            threading.Thread(target=lambda s=source: handed.append(self.poll_source(s)))
            for source in self.sources
            for _ in range(pollers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(handed)

    def _receive(self, source: EventSource) -> list[dict[str, Any]]:
        """Up to the source's `BatchSize` messages, in receives of at most 10."""
        messages: list[dict[str, Any]] = []
        while len(messages) < source.batch_size:
            request = {"QueueUrl": source.queue_url}
            got = self.sqs.receive_message(
                **request,
                MaxNumberOfMessages=min(SQS_RECEIVE_MAX, source.batch_size - len(messages)),
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not got:
                break
            if self.recorder is not None:
                self.recorder.record(source.role, "sqs", "ReceiveMessage", request)
            messages += got
            if len(got) < SQS_RECEIVE_MAX:
                break
        with self._lock:
            self.first_deliveries[source.function] += sum(
                1 for m in messages if m["Attributes"].get("ApproximateReceiveCount") == "1"
            )
        return messages

    def _delete(self, source: EventSource, messages: list[dict[str, Any]]) -> None:
        """`DeleteMessageBatch`, 10 at a time (as Lambda's poller deletes a batch's successes)."""
        for start in range(0, len(messages), SQS_RECEIVE_MAX):
            chunk = messages[start : start + SQS_RECEIVE_MAX]
            request = {
                "QueueUrl": source.queue_url,
                "Entries": [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            }
            self.sqs.delete_message_batch(**request)
            if self.recorder is not None:
                self.recorder.record(source.role, "sqs", "DeleteMessageBatch", request)

    def poll_source(self, source: EventSource) -> int:
        messages = self._receive(source)
        if not messages:
            return 0
        groups = Counter(
            m["Attributes"]["MessageGroupId"] for m in messages if "MessageGroupId" in m["Attributes"]
        )
        with self._lock:
            held = self.in_flight[source.queue_url]
            self.violations += [group for group in groups if held[group]]
            self.overlaps += [(new, old) for new in groups for old in held if held[old] and old != new]
            held.update(groups)
        event = {"Records": [_sqs_record(m, source.queue_arn) for m in messages]}
        try:
            result = self.fleet.invoke(source.function, event)
        except Exception:  # the whole batch comes back after its visibility timeout
            failed = {m["MessageId"] for m in messages}
        else:
            failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
        finally:
            with self._lock:  # settled before any delete lets SQS hand the group out again
                self.in_flight[source.queue_url].subtract(groups)
        self._delete(source, [m for m in messages if m["MessageId"] not in failed])
        return len(messages)


def _sqs_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "messageAttributes": message.get("MessageAttributes", {}),
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }


# -- EMR Serverless ------------------------------------------------------------------------------------


class EmrCompute:
    """Runs the Spark job of each EMR job run moto accepts (see the module docstring)."""

    def __init__(self, runner: Any, s3_settings: Any) -> None:
        self.runner = runner
        self.s3_settings = s3_settings
        self.local_jobs: dict[str, str] = {}  # EMR job run id -> local job id
        self.started_at: dict[str, float] = {}
        self.faults: list[str] = []  # "FAILED" | "STUCK" | "SLOW", applied to the next job runs
        self.started: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from moto.core.utils import utcnow
        from moto.emrserverless.exceptions import ValidationException
        from moto.emrserverless.models import EMRServerlessBackend

        original_start = EMRServerlessBackend.start_job_run
        original_get = EMRServerlessBackend.get_job_run
        original_cancel = EMRServerlessBackend.cancel_job_run
        original_list = EMRServerlessBackend.list_job_runs
        compute = self

        def start_job_run(backend: Any, application_id: str, client_token: str, **kwargs: Any) -> Any:
            for run in backend.job_runs.get(application_id, []):
                if run.client_token == client_token:
                    return run
            run = original_start(backend, application_id=application_id, client_token=client_token, **kwargs)
            run.created_at = run.updated_at = utcnow()  # moto keeps the day only; EMR the instant
            compute.start(run)
            return run

        def get_job_run(backend: Any, application_id: str, job_run_id: str) -> Any:
            run = original_get(backend, application_id, job_run_id)
            compute.refresh(run)
            return run

        def cancel_job_run(backend: Any, application_id: str, job_run_id: str) -> Any:
            run = original_get(backend, application_id, job_run_id)
            compute.refresh(run)
            if run.state in {"SUCCESS", "FAILED", "CANCELLED"}:
                raise ValidationException(f"Job run {job_run_id} is in a final state {run.state}")
            if job_run_id in compute.local_jobs:
                compute.runner.cancel(compute.local_jobs[job_run_id])
            return original_cancel(backend, application_id, job_run_id)

        monkeypatch.setattr(EMRServerlessBackend, "start_job_run", start_job_run)
        monkeypatch.setattr(EMRServerlessBackend, "get_job_run", get_job_run)

        def list_job_runs(
            backend: Any,
            application_id: str,
            created_at_after: Any,
            created_at_before: Any,
            states: list[str] | None,
        ) -> Any:
            for run in backend.job_runs.get(application_id, []):
                compute.refresh(run)  # states as GetJobRun reports them, before moto filters by state
            return original_list(
                backend, application_id, _utc(created_at_after), _utc(created_at_before), states
            )

        monkeypatch.setattr(EMRServerlessBackend, "cancel_job_run", cancel_job_run)
        monkeypatch.setattr(EMRServerlessBackend, "list_job_runs", list_job_runs)

    def start(self, run: Any) -> None:
        from kafscale_iceberg.adapters.documents import DocumentStore
        from kafscale_iceberg.domain.runs import RunPlan

        self.started_at[run.id] = time.monotonic()
        self.started.append(run.id)
        fault = self.faults.pop(0) if self.faults else None
        if fault == "FAILED":
            run.state, run.state_details = "FAILED", "Job failed: the driver's container exited (fault)"
            return
        run.state = "RUNNING"
        if fault == "STUCK":
            return
        arguments = list(run.job_driver["sparkSubmit"]["entryPointArguments"])
        if "--compaction" in arguments:  # a maintenance pass's compaction job
            from kafscale_iceberg.domain.compaction_jobs import CompactionJob

            job_uri = arguments[arguments.index("--compaction") + 1]
            job = CompactionJob.model_validate_json(DocumentStore(self.s3_settings).read_text(job_uri))
            self.local_jobs[run.id] = self.runner.start_compaction(job, job_uri)
            return
        plan_uri = arguments[arguments.index("--plan") + 1]
        plan = RunPlan.model_validate_json(DocumentStore(self.s3_settings).read_text(plan_uri))

        def run_locally() -> None:
            self.local_jobs[run.id] = self.runner.start(plan, plan_uri)

        if fault == "SLOW":  # RUNNING for SLOW_START_SECONDS before the Spark job starts
            threading.Timer(SLOW_START_SECONDS, run_locally).start()
            return
        run_locally()

    def refresh(self, run: Any) -> None:
        if run.state in {"SUCCESS", "FAILED", "CANCELLED"}:
            return
        if run.id not in self.local_jobs:  # a stuck job (fault): EMR fails it at its timeout
            limit = run.execution_timeout_minutes * 60 * JOB_TIMEOUT_SCALE
            if time.monotonic() - self.started_at.get(run.id, time.monotonic()) > limit:
                run.state, run.state_details = "FAILED", "Job run timed out (executionTimeoutMinutes)"
            return
        status = self.runner.status(self.local_jobs[run.id])
        run.state = {"succeeded": "SUCCESS", "failed": "FAILED", "cancelled": "CANCELLED"}.get(
            status.state.value, "RUNNING"
        )
        run.state_details = status.detail


def _utc(value: Any) -> datetime | None:
    """A `ListJobRuns` time bound as moto's server receives it (ISO 8601 text, or epoch seconds) ->
    the naive UTC datetime moto compares with."""
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, int | float) or str(value).replace(".", "", 1).isdigit():
        return datetime.fromtimestamp(float(value), tz=UTC).replace(tzinfo=None)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC).replace(tzinfo=None)


# -- Step Functions' emr-serverless:startJobRun.sync ------------------------------------------------------


def _camel_case(value: Any, *, keep_keys: bool = False) -> Any:
    """Step Functions' PascalCase parameters -> boto3's camelCase (`Tags` keys kept)."""
    if isinstance(value, dict):
        return {
            (key if keep_keys else key[:1].lower() + key[1:]): _camel_case(item, keep_keys=key == "Tags")
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_camel_case(item) for item in value]
    return value


def emr_serverless_sync_service() -> Any:
    """moto's interpreter forwards `emr-serverless` tasks as plain requests and knows no `.sync`: this
    service starts the job run (PascalCase parameters as Step Functions takes them) and then reads it
    with `GetJobRun` until it is final, as Step Functions does (it learns the end from EventBridge):
    SUCCESS is the task's output, FAILED/CANCELLED fail the task with `States.TaskFailed` and the job
    run as the cause; an API error is `EMRServerless.<code>`. Not covered: whether Step Functions
    cancels the job run of a stopped task (the state machine does not rely on it: the abort step
    cancels the run's job)."""
    from botocore.exceptions import ClientError
    from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback as callback,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
        ResourceCondition,
    )
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
    from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

    class EmrServerlessSync(callback.StateTaskServiceCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            # waitForTaskToken too, as moto's own .sync services list it (its callback plumbing needs it).
            super().__init__(
                supported_integration_patterns={ResourceCondition.Sync, ResourceCondition.WaitForTaskToken}
            )

        def _get_supported_parameters(self) -> set[str] | None:
            if self.resource.api_action != "startJobRun":
                return None  # the box implements only what the state machine uses
            return {
                "ApplicationId",
                "ClientToken",
                "Name",
                "ExecutionRoleArn",
                "JobDriver",
                "ConfigurationOverrides",
                "Tags",
                "ExecutionTimeoutMinutes",
            }

        def _from_error(self, env: Any, ex: Exception) -> Any:
            if isinstance(ex, ClientError):
                name = f"EMRServerless.{ex.response['Error']['Code']}"
                details = TaskFailedEventDetails(
                    error=name,
                    cause=str(ex),
                    resource=self._get_sfn_resource(),
                    resourceType=self._get_sfn_resource_type(),
                )
                return FailureEvent(
                    env=env,
                    error_name=CustomErrorName(name),
                    event_type=HistoryEventType.TaskFailed,
                    event_details=EventDetails(taskFailedEventDetails=details),
                )
            return super()._from_error(env=env, ex=ex)

        def _eval_service_task(
            self,
            env: Any,
            resource_runtime_part: Any,
            normalised_parameters: dict[str, Any],
            state_credentials: Any,
        ) -> None:
            assert self.resource.api_action == "startJobRun", self.resource.api_action
            client = boto_client_for(
                service="emr-serverless",
                region=resource_runtime_part.region,
                state_credentials=state_credentials,
            )
            response = client.start_job_run(**_camel_case(normalised_parameters))
            env.stack.append({"ApplicationId": response["applicationId"], "JobRunId": response["jobRunId"]})

        def _build_sync_resolver(
            self,
            env: Any,
            resource_runtime_part: Any,
            normalised_parameters: dict[str, Any],
            state_credentials: Any,
        ) -> Callable[[], Any]:
            client = boto_client_for(
                service="emr-serverless",
                region=resource_runtime_part.region,
                state_credentials=state_credentials,
            )
            started = env.stack.pop()
            ids = {"applicationId": started["ApplicationId"], "jobRunId": started["JobRunId"]}

            def resolve() -> dict[str, Any] | None:
                run = client.get_job_run(**ids)["jobRun"]
                if run["state"] == "SUCCESS":
                    return {"JobRunId": run["jobRunId"], "State": run["state"]}
                if run["state"] in {"FAILED", "CANCELLED"}:
                    cause = json.dumps({k: v for k, v in run.items() if isinstance(v, (str, int))})
                    details = TaskFailedEventDetails(
                        error=StatesErrorNameType.StatesTaskFailed.to_name(),
                        cause=cause,
                        resource=self._get_sfn_resource(),
                        resourceType=self._get_sfn_resource_type(),
                    )
                    raise FailureEventException(
                        FailureEvent(
                            env=env,
                            error_name=StatesErrorName(typ=StatesErrorNameType.StatesTaskFailed),
                            event_type=HistoryEventType.TaskFailed,
                            event_details=EventDetails(taskFailedEventDetails=details),
                        )
                    )
                return None

            return resolve

    return EmrServerlessSync()


# -- the box -------------------------------------------------------------------------------------------


@dataclass
class Box:
    """One deployed stack on emulated services (see the module docstring)."""

    deployment: Deployment
    fleet: LambdaFleet
    mappings: EventSourceMappings
    recorder: CallRecorder
    emr: EmrCompute
    s3: Any
    sqs: Any
    sfn: Any
    segment_bucket: str
    namespace: str
    state_machine_arn: str
    moto_url: str
    warehouse: str
    etcd: Any
    key_prefix: str
    queue_urls: dict[str, str] = field(default_factory=dict)
    async_invokes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """`Invoke` with `InvocationType=Event` by a function: (function, event), run by `pump`."""
    config: dict[str, Any] = field(default_factory=dict)
    """The config file the user wrote (`ConfigLocation`); `rewrite_config` changes it."""
    s3tables: Any = None
    """With `CatalogType=s3tables`, the stand-in of S3 Tables (tests/support/s3tables_box.py)."""

    def rewrite_config(self, **sections: Any) -> None:
        """The user edits the config file: `sections` replace its top-level keys. Every invocation
        reads it again (the box clears the functions' cached assembly), as a new deployment's would."""
        self.config.update(sections)
        location = str(self.deployment.parameters["ConfigLocation"]).removeprefix("s3://")
        bucket, key = location.split("/", 1)
        self.s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(self.config).encode())

    def run_async_invokes(self) -> int:
        """Run the queued asynchronous invocations (Lambda's event queue); how many ran."""
        ran = 0
        while self.async_invokes:
            name, event = self.async_invokes.pop(0)
            try:
                self.fleet.invoke(self.fleet.by_name[name], event)
            except Exception:  # Lambda retries an async event twice, then drops it: the test sees it
                traceback.print_exc()
            ran += 1
        return ran

    def pump(
        self, *, until: Callable[[], bool] | None = None, timeout_s: float = 120.0, pollers: int = 1
    ) -> None:
        """Run the event sources until nothing is left to do (no message, no execution running) or
        `until()` holds; fails once `timeout_s` pass with no progress (nothing handed out, no
        function invoked, the running executions and pending messages unchanged), so a loaded
        machine that is slow but moving is waited for (a run's job watched for minutes), and a stuck
        box still fails; a box moving forever (a job that never ends) fails after 10 x `timeout_s`.
        `pollers` > 1 polls each source that many times at once."""
        started = last_progress = time.monotonic()
        idle_rounds = 0
        seen: tuple[int, int, int] | None = None
        while time.monotonic() - last_progress < timeout_s and time.monotonic() - started < 10 * timeout_s:
            handed = self.mappings.poll_concurrently(pollers) if pollers > 1 else self.mappings.poll_once()
            handed += self.run_async_invokes()
            if until is not None and until():
                return
            state = (self.running_executions(), self.messages_pending(), len(self.fleet.invocations))
            if handed or state != seen:
                last_progress, seen = time.monotonic(), state
            idle_rounds = 0 if handed or state[0] or state[1] else idle_rounds + 1
            if until is None and idle_rounds >= 3:
                return
            time.sleep(0.05 if handed else 0.2)
        pytest.fail(f"the box made no progress for {timeout_s} s (or none to an end): {self.describe()}")

    def redrive(self, dlq: str, source: str) -> int:
        """Move the messages of the `dlq` queue back to `source` (an operator's `aws sqs
        start-message-move-task`); returns how many were moved."""
        moved = 0
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.queue_urls[dlq], MaxNumberOfMessages=10, AttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                return moved
            for message in messages:
                fifo = {}
                if "MessageGroupId" in message["Attributes"]:
                    fifo = {
                        "MessageGroupId": message["Attributes"]["MessageGroupId"],
                        "MessageDeduplicationId": uuid.uuid4().hex,
                    }
                self.sqs.send_message(QueueUrl=self.queue_urls[source], MessageBody=message["Body"], **fifo)
                self.sqs.delete_message(QueueUrl=self.queue_urls[dlq], ReceiptHandle=message["ReceiptHandle"])
                moved += 1

    def running_executions(self) -> int:
        runs = self.sfn.list_executions(stateMachineArn=self.state_machine_arn, statusFilter="RUNNING")
        return len(runs["executions"])

    def executions(self) -> list[dict[str, Any]]:
        return list(self.sfn.list_executions(stateMachineArn=self.state_machine_arn)["executions"])

    def messages_pending(self) -> int:
        total = 0
        for name in ("SegmentEventsQueue", "WorkQueue"):
            attributes = self.sqs.get_queue_attributes(
                QueueUrl=self.queue_urls[name],
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            total += int(attributes["ApproximateNumberOfMessages"])
            total += int(attributes["ApproximateNumberOfMessagesNotVisible"])
        return total

    def describe(self) -> str:
        states = Counter(e["status"] for e in self.executions())
        calls = Counter((i.function, i.error) for i in self.fleet.invocations)
        pending = self.messages_pending()
        return f"executions {dict(states)}, messages pending {pending}, invocations {dict(calls)}"

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        return list(self.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"])

    def catalog(self) -> Any:
        """The stack's Glue catalog (pyiceberg, on moto's Glue and S3), or its S3 Tables stand-in's."""
        if self.s3tables is not None:
            return self.s3tables.catalog()
        from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog

        return load_iceberg_catalog(
            CatalogSettings(
                type="glue",
                warehouse=self.warehouse,
                s3_endpoint=self.moto_url,
                s3_region=REGION,
                s3_path_style=True,
                glue_endpoint=self.moto_url,
            )
        )

    def _table(self, table: str) -> Any:
        """The table through the Glue catalog; None before its first commit."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.catalog().load_table(table)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The table's rows (pyiceberg reads the current snapshot through the Glue catalog)."""
        loaded = self._table(table)
        rows: list[dict[str, Any]] = [] if loaded is None else loaded.scan().to_arrow().to_pylist()
        return rows

    def data_files(self, table: str) -> list[Any]:
        """The table's data files now (none before its first commit)."""
        loaded = self._table(table)
        return [] if loaded is None else [t.file for t in loaded.scan().plan_files()]

    def committed_offsets(self, topic: str) -> dict[int, int]:
        from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore

        with EtcdCheckpointStore([self.etcd.url], key_prefix=self.key_prefix) as store:
            committed = store.load_committed_offsets(topic)
        return {p: s.offset for p, s in committed.states.items()}


def substituted_definition(deployment: Deployment) -> str:
    """The state machine definition as CloudFormation hands it to Step Functions."""
    machine = deployment.resources["RunStateMachine"]["Properties"]
    text = (ROOT / machine["DefinitionUri"]).read_text()
    for name, node in machine["DefinitionSubstitutions"].items():
        text = text.replace("${" + name + "}", str(deployment.evaluate(node)))
    return text


def local_emr_runner(moto_url: str) -> Any:
    """The EMR jobs' compute: the session's local Spark, warm (the job code is spark_app's). One per
    test: local job ids are run ids, which repeat across boxes (same topic, same offsets)."""
    from kafscale_iceberg.adapters.s3_segments import S3Settings
    from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner

    return LocalSparkJobRunner(
        master="local[2]",
        keep_session_warm=True,
        s3=S3Settings(endpoint_url=moto_url, region="eu-west-1", path_style=True),
    )


@contextmanager
def open_box(**options: Any) -> Iterator[Box]:
    """`build_box(**options)`, unregistered when the block ends."""
    box = build_box(**options)
    try:
        yield box
    finally:
        unregister(box)


@contextmanager
def open_spark_box(**options: Any) -> Iterator[Box]:
    """`open_box(**options)` whose EMR jobs run on a warm local Spark of their own (`local_emr_runner`),
    closed when the block ends."""
    runner = local_emr_runner(options["moto_url"])
    try:
        with open_box(spark_runner=runner, **options) as box:
            yield box
    finally:
        runner.close()


SparkBoxOpener = Callable[..., AbstractContextManager[Box]]


@pytest.fixture
def spark_box(
    spark: Any, moto_server: Any, etcd_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> SparkBoxOpener:
    """`open_spark_box` on this test's moto, etcd, `tmp_path` and `monkeypatch` (and after the session's
    local Spark started): `with spark_box(mappings=[...], **options) as box:`."""
    return functools.partial(
        open_spark_box, moto_url=moto_server.url, etcd=etcd_server, tmp_path=tmp_path, monkeypatch=monkeypatch
    )


def build_box(
    *,
    moto_url: str,
    etcd: Any,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mappings: list[dict[str, Any]],
    runs: dict[str, Any] | None = None,
    environment_overrides: dict[str, str] | None = None,
    maintenance: dict[str, Any] | None = None,
    runner: dict[str, Any] | None = None,
    visibility_seconds: int = VISIBILITY_SECONDS,
    parameters: dict[str, str] | None = None,
    schema_registry: dict[str, Any] | None = None,
    s3tables: Any = None,
) -> Box:
    """Create the stack's resources on moto, wire the fakes, and return the box (one per test).
    `s3tables` (tests/support/s3tables_box.py's `S3TablesStandIn`) deploys with `CatalogType=s3tables`."""
    from moto.core.config import default_user_config
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
        lambda_eval_utils,
        state_task_factory,
    )
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import (
        WaitFunction,
    )

    from kafscale_iceberg.adapters.s3_segments import S3Settings

    stack = f"box{uuid.uuid4().hex[:8]}"
    namespace = "prod"
    parameters = {  # the template's parameters: the box's, and a test's own (`parameters`)
        "ConfigLocation": f"s3://{stack}-config/config.yaml",
        "SegmentBucketMode": "create",
        "SegmentBucketName": f"{stack}-segments",
        "Namespace": namespace,
        "SubnetIds": "subnet-0a,subnet-0b",
        "SecurityGroupIds": "sg-0c",
        "WarehouseBucket": f"{stack}-lake",
        "GlueDatabaseNames": "shop",
        **(s3tables.parameters if s3tables is not None else {}),
        **(parameters or {}),
    }
    deployment = Deployment(parameters, stack=stack)
    session = boto3.Session(region_name=REGION)  # the box's own calls: not recorded

    def client(service: str) -> Any:
        return session.client(service, endpoint_url=moto_url, region_name=REGION)

    s3, sqs, sfn, emr = client("s3"), client("sqs"), client("stepfunctions"), client("emr-serverless")
    port = moto_url.rsplit(":", 1)[1]
    monkeypatch.setenv("MOTO_PORT", port)  # where moto's interpreter sends its service integrations
    monkeypatch.setitem(default_user_config["stepfunctions"], "execute_state_machine", True)

    # Buckets and queues, named as the template's resources are.
    for bucket in (
        deployment.attribute("SegmentBucket", "Ref"),
        deployment.attribute("RunsBucket", "Ref"),
        f"{stack}-config",
        f"{stack}-lake",
    ):
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    queue_urls: dict[str, str] = {}
    for logical_id in ("SegmentEventsDLQ", "WorkDLQ", "RejectedQueue", "SegmentEventsQueue", "WorkQueue"):
        properties = deployment.evaluate(deployment.resources[logical_id]["Properties"])
        attributes = {"VisibilityTimeout": str(visibility_seconds)}
        if properties.get("FifoQueue"):
            attributes["FifoQueue"] = "true"
            attributes["ContentBasedDeduplication"] = "false"
        if "RedrivePolicy" in properties:
            attributes["RedrivePolicy"] = json.dumps(properties["RedrivePolicy"])
        name = deployment.attribute(logical_id, "QueueName")
        queue_urls[logical_id] = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    bucket_properties = deployment.evaluate(deployment.resources["SegmentBucket"]["Properties"])
    (notification,) = bucket_properties["NotificationConfiguration"]["QueueConfigurations"]
    s3.put_bucket_notification_configuration(
        Bucket=parameters["SegmentBucketName"],
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": notification["Queue"],
                    "Events": [notification["Event"]],
                    "Filter": {"Key": {"FilterRules": notification["Filter"]["S3Key"]["Rules"]}},
                }
            ]
        },
    )
    # moto sends an s3:TestEvent first (as S3 does): leave it for the router to ignore.

    application_id = emr.create_application(
        name=f"{stack}-spark",
        releaseLabel="emr-7.2.0",
        type="SPARK",  # moto knows no emr-spark-8 label
    )["applicationId"]
    machine_name = deployment.attribute("RunStateMachine", "Name")
    state_machine_arn = sfn.create_state_machine(
        name=machine_name,
        definition=substituted_definition(deployment),
        roleArn=deployment.attribute("RunStateMachineRole", "Arn"),
        type="STANDARD",
    )["stateMachineArn"]
    assert state_machine_arn == deployment.attribute("RunStateMachine", "Ref")

    # The config file the user writes, and each function's environment.
    key_prefix = f"{stack}/processors"
    config = {
        "s3": {
            "bucket": parameters["SegmentBucketName"],
            "endpoint": moto_url,
            "path_style": True,
            "region": REGION,
        },
        "iceberg": {
            # The template's catalog: Glue (moto's), the warehouse in WarehouseBucket (the stack's
            # environment sets the type and the warehouse; only the endpoint is the box's).
            "catalog": {"type": "glue", "properties": {"glue.endpoint": moto_url}},
            "warehouse": f"s3://{stack}-lake/warehouse",
        }
        if s3tables is None
        else s3tables.iceberg_config(),
        "etcd": {"endpoints": [etcd.url]},
        "offsets": {"key_prefix": key_prefix},
        # No backoff: the state machine's Backoff wait is scaled, the launcher's check of it is wall time.
        "runs": {"retry_backoff_seconds": 0, "min_bytes_per_run": 0, **(runs or {})},
        "mappings": mappings,
        # Every run on EMR unless a test gives the Lambda runner its runs (runner.lambda.max_bytes).
        "runner": runner or {"lambda": {"max_bytes": 0}},
        **({"maintenance": maintenance} if maintenance else {}),
        **({"schema_registry": schema_registry} if schema_registry else {}),
    }
    s3.put_object(Bucket=f"{stack}-config", Key="config.yaml", Body=json.dumps(config).encode())
    common = {
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "KafScaleIceberg",
    }
    environment: dict[str, dict[str, str]] = {}
    for function in functions():
        variables = dict(deployment.environment(function)) | common
        variables["KAFSCALE_ICEBERG_EMR_APPLICATION_ID"] = application_id
        variables |= environment_overrides or {}
        environment[function.logical_id] = variables

    recorder = CallRecorder(deployment, {application_id: TEMPLATE_APPLICATION_ID})
    if s3tables is not None:
        s3tables.install(monkeypatch, recorder)
    # The functions' clients come from boto3's default session: give the box its own, and give the
    # previous one back at teardown (a later test in another region would find no queues otherwise).
    # pyiceberg's Glue catalog makes its own boto3 session: every session made during the test records.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", boto3.DEFAULT_SESSION)
    original_init = boto3.session.Session.__init__

    async_invokes: list[tuple[str, dict[str, Any]]] = []

    def queue_async_invoke(model: Any, context: dict[str, Any], request_signer: Any = None, **_: Any) -> Any:
        """A function's `Invoke`, recorded for IAM (this answer stops the other `before-call`
        handlers): with `InvocationType=Event` queued for `pump` (Lambda's event queue) and answered
        202 as Lambda does; synchronous (`RequestResponse`, the checkpoint function) run at once,
        inside the calling invocation, and answered as Lambda does; an invocation of a function that
        is not the stack's goes on to moto."""
        params = context.get("aws_box_params", {})
        if params.get("InvocationType") == "Event":
            recorder.hook(model, context, request_signer)
            async_invokes.append((params["FunctionName"], json.loads(params.get("Payload") or b"{}")))
            return SimpleNamespace(status_code=202, headers={}), {"StatusCode": 202}
        if params.get("FunctionName") not in fleet.by_name:
            return None
        recorder.hook(model, context, request_signer)
        answer = fleet.invoke_payload(params["FunctionName"], params.get("Payload") or b"")
        body = json.dumps(answer.pop("Payload")).encode()
        answer["Payload"] = StreamingBody(io.BytesIO(body), len(body))
        return SimpleNamespace(status_code=200, headers={}), answer

    def recording_init(session: Any, *args: Any, **kwargs: Any) -> None:
        original_init(session, *args, **kwargs)
        session.events.register("before-parameter-build", recorder.keep_params)
        session.events.register("before-call", recorder.hook)
        session.events.register_last("before-call.lambda.Invoke", queue_async_invoke)

    monkeypatch.setattr(boto3.session.Session, "__init__", recording_init)
    boto3.setup_default_session(region_name=REGION)

    # The EMR job's own calls: its driver runs on the local runner's job thread (attributed by the
    # hook above); its Python workers are other processes, which sign with their own key, recorded
    # where moto receives them.
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from pyspark import SparkContext

    original_call = DomainDispatcherApplication.__call__

    def recorded_call(app: Any, environ: dict[str, Any], start_response: Any) -> Any:
        recorder.server_hook(environ)
        for forward in recorder.forwards:
            answer = forward(environ, start_response)
            if answer is not None:
                return answer
        return original_call(app, environ, start_response)

    monkeypatch.setattr(DomainDispatcherApplication, "__call__", recorded_call)
    spark_context = SparkContext._active_spark_context
    assert spark_context is not None, "the box needs the session's SparkContext (the spark fixture)"
    monkeypatch.setitem(spark_context.environment, "AWS_ACCESS_KEY_ID", EMR_JOB_ACCESS_KEY)
    monkeypatch.setitem(spark_context.environment, "AWS_SECRET_ACCESS_KEY", "emr-job-secret")

    fleet = LambdaFleet(deployment, environment)
    from functions import checkpoints

    checkpoints._stores.cache_clear()  # the checkpoint function's etcd: this box's, built on first use
    recorder.active_role = lambda: fleet.active_role
    # A pool thread runs in its submitter's context (the function's principal, for IAM attribution).
    from concurrent.futures import ThreadPoolExecutor

    original_submit = ThreadPoolExecutor.submit

    def submit_in_context(pool: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return original_submit(pool, contextvars.copy_context().run, fn, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", submit_in_context)

    def invoke_lambda_function(
        parameters: dict[str, Any], region: str, state_credentials: Any
    ) -> dict[str, Any]:
        if (
            parameters["FunctionName"] not in fleet.by_name
        ):  # an execution of an earlier box, still winding down
            return _function_error("ResourceNotFoundException", f"no function {parameters['FunctionName']}")
        recorder.record(STATE_MACHINE_ROLE, "lambda", "Invoke", parameters)
        return fleet.invoke_payload(parameters["FunctionName"], parameters.get("Payload") or b"")

    monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", invoke_lambda_function)

    def scaled_wait(self: Any, env: Any, wait_seconds: int) -> None:
        if wait_seconds > 0:
            env.program_state_event.wait(wait_seconds * TIME_SCALE)

    monkeypatch.setattr(WaitFunction, "_wait_interval", scaled_wait)
    original_service_for = state_task_factory.state_task_service_for

    def service_for(service_name: str) -> Any:
        if service_name == "emr-serverless":
            return emr_serverless_sync_service()
        return original_service_for(service_name=service_name)

    monkeypatch.setattr(state_task_factory, "state_task_service_for", service_for)
    # moto's Parallel re-raises a branch's error as a custom error name, which refuses `States.*`: a
    # branch ending in States.TaskFailed (a failed job) crashed the execution instead of reaching the
    # Parallel's Catch. Step Functions propagates the branch's error name as it is.
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import branches_decl

    def branch_error_name(error_name: str | None) -> Any:
        if error_name is not None and error_name.startswith("States."):
            return StatesErrorName.from_name(error_name)
        return CustomErrorName(error_name)

    monkeypatch.setattr(branches_decl, "CustomErrorName", branch_error_name)
    monkeypatch.setattr(
        retrier_decl, "time", SimpleNamespace(sleep=lambda seconds: time.sleep(seconds * TIME_SCALE))
    )

    emr_compute = EmrCompute(spark_runner, S3Settings(endpoint_url=moto_url, region=REGION, path_style=True))
    emr_compute.install(monkeypatch)

    sources = []
    for function in functions():
        for event in function.properties.get("Events", {}).values():
            if event["Type"] != "SQS":
                continue
            queue_id = event["Properties"]["Queue"]["Fn::GetAtt"][0]
            sources.append(
                EventSource(
                    function.logical_id,
                    queue_urls[queue_id],
                    deployment.attribute(queue_id, "Arn"),
                    int(event["Properties"].get("BatchSize", 10)),
                    function.role_id,
                )
            )
    box = Box(
        deployment=deployment,
        fleet=fleet,
        mappings=EventSourceMappings(fleet, sqs, sources, recorder),
        recorder=recorder,
        emr=emr_compute,
        s3=s3,
        sqs=sqs,
        sfn=sfn,
        segment_bucket=parameters["SegmentBucketName"],
        namespace=namespace,
        state_machine_arn=state_machine_arn,
        moto_url=moto_url,
        warehouse=str(deployment.environment(functions()[0])["KAFSCALE_ICEBERG_WAREHOUSE"]),
        etcd=etcd,
        key_prefix=key_prefix,
        queue_urls=queue_urls,
        async_invokes=async_invokes,
        config=config,
        s3tables=s3tables,
    )
    return box


def unregister(box: Box) -> None:
    """Stop the box's executions still running and stop recording calls (the fixture's teardown)."""
    for execution in box.executions():
        if execution["status"] == "RUNNING":
            box.sfn.stop_execution(executionArn=execution["executionArn"], cause="test ended")
    if boto3.DEFAULT_SESSION is not None:
        boto3.DEFAULT_SESSION.events.unregister("before-parameter-build", box.recorder.keep_params)
        boto3.DEFAULT_SESSION.events.unregister("before-call", box.recorder.hook)
    # moto's Glue outlives the box (one server per session): the next box starts without its tables.
    glue = boto3.Session(region_name=REGION).client("glue", endpoint_url=box.moto_url)
    for database in str(box.deployment.parameters["GlueDatabaseNames"]).split(","):
        try:
            tables = glue.get_tables(DatabaseName=database)["TableList"]
        except glue.exceptions.EntityNotFoundException:
            continue
        for table in tables:
            glue.delete_table(DatabaseName=database, Name=table["Name"])
        glue.delete_database(Name=database)
