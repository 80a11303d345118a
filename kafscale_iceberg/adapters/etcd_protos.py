"""etcd3's generated protobuf modules, rebuilt so they load under any protobuf implementation.

etcd3 0.12 (its last release) ships `etcd3/etcdrpc/{kv,auth,rpc}_pb2.py` generated for protobuf 3:
they build descriptors directly (`_descriptor.FileDescriptor(serialized_pb=...)`), which protobuf
>= 4 refuses under its compiled runtime (upb: "Descriptors cannot be created directly") and allows
only under the pure-Python one, chosen per process before protobuf is first imported. Choosing it
made every entry point responsible for the order of its imports (pyspark imports protobuf first),
and slowed protobuf everywhere else in the process (the record decoders of `value_format: protobuf`).

`install()` instead reads each module's serialized `FileDescriptorProto` from its source (a
string literal, read without running the module), adds it to the default descriptor pool and
builds the module as today's `protoc` output does (`google.protobuf.internal.builder`); the
modules are put in `sys.modules` under etcd3's names before etcd3 is imported, so etcd3 and its
grpc stubs use them unchanged. The wire format is the descriptors', so nothing on the wire changes.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import types
from pathlib import Path

_PACKAGE = "etcd3.etcdrpc"
_MODULES = ("kv_pb2", "auth_pb2", "rpc_pb2")
"""In dependency order: `rpc.proto` imports `kv.proto` and `auth.proto`."""
_SERIALIZED = re.compile(r"serialized_pb=_b\((?P<literal>'(?:[^'\\]|\\.)*')\)")


def install() -> None:
    """Put etcd3's protobuf modules, built for this protobuf, in `sys.modules` (once per process)."""
    if all(f"{_PACKAGE}.{name}" in sys.modules for name in _MODULES):
        return
    spec = importlib.util.find_spec("etcd3")  # finds the package without importing it
    if spec is None or spec.origin is None:
        raise ImportError("etcd3 is not installed (the etcd checkpoint store needs it)")
    from google.protobuf import descriptor_pool  # noqa: PLC0415 - after the checks above
    from google.protobuf.internal import builder  # noqa: PLC0415

    folder = Path(spec.origin).parent / "etcdrpc"
    pool = descriptor_pool.Default()
    for name in _MODULES:
        qualified = f"{_PACKAGE}.{name}"
        if qualified in sys.modules:
            continue
        source = (folder / f"{name}.py").read_text(encoding="utf-8")
        found = _SERIALIZED.search(source)
        if found is None:
            raise ImportError(f"{folder / name}.py: no serialized descriptor (an etcd3 other than 0.12?)")
        serialized = ast.literal_eval(found["literal"]).encode("latin1")  # what etcd3's `_b` does
        module = types.ModuleType(qualified)
        module.__file__ = str(folder / f"{name}.py")
        descriptor = pool.AddSerializedFile(serialized)
        builder.BuildMessageAndEnumDescriptors(descriptor, module.__dict__)
        builder.BuildTopDescriptorsAndMessages(descriptor, qualified, module.__dict__)
        sys.modules[qualified] = module
