"""etcd3's protobuf-3 modules load after protobuf, under its compiled runtime (`adapters/etcd_protos.py`).

Each check runs in a fresh interpreter: protobuf chooses its runtime once per process, on first import.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # subprocesses


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_etcd_loads_after_protobuf_under_the_compiled_runtime() -> None:
    done = _python(
        "import google.protobuf.descriptor_pb2\n"  # what pyspark and the Protobuf decoder import first
        "from kafscale_iceberg.adapters import etcd_client\n"
        "from google.protobuf.internal import api_implementation\n"
        "import etcd3.etcdrpc as rpc\n"
        "request = rpc.RangeRequest(key=b'k', range_end=b'l', sort_order=rpc.RangeRequest.DESCEND)\n"
        "echoed = rpc.RangeRequest.FromString(request.SerializeToString())\n"
        "print(api_implementation.Type(), echoed.range_end)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["upb", "b'l'"]


def test_the_pure_python_runtime_still_works_when_chosen() -> None:
    done = _python(
        "from kafscale_iceberg.adapters import etcd_client\n"
        "from google.protobuf.internal import api_implementation\n"
        "from etcd3.etcdrpc import kv_pb2\n"
        "print(api_implementation.Type(), kv_pb2.Event.DELETE)\n",
        PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["python", "1"]
