"""Protobuf schemas from the registry made into message classes the runtime (upb) parses with.

A registered Protobuf schema is either its compiled `FileDescriptorProto` in base64 (what a registry
answers to `?format=serialized`, and what confluent-kafka's serializers register) or `.proto` text
(what registries answer by default); text is compiled in-process by the `protoc` that
`grpcio-tools` bundles (no network, no binary of our own). Its `references` (imports of other
subjects' schemas) are read from the registry by subject and version, recursively, and the imports
of the well-known types (`google/protobuf/*.proto`) come from the runtime's own descriptors. Each
schema gets its own `DescriptorPool`: two schemas may define the same message name differently.

Messages are found by the Confluent message-index path (`message_at`: the first index picks a
top-level message of the file, the next its nested message, ...) or by full name (`value_message`).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.record_schemas import RegisteredSchema
from kafscale_iceberg.exceptions import RecordSchemaError

_WELL_KNOWN = (
    "any_pb2",
    "api_pb2",
    "duration_pb2",
    "empty_pb2",
    "field_mask_pb2",
    "source_context_pb2",
    "struct_pb2",
    "timestamp_pb2",
    "type_pb2",
    "wrappers_pb2",
)
_PROTOC_LOCK = threading.Lock()
"""`protoc` runs in-process: one compilation at a time."""
_MAX_REFERENCE_DEPTH = 32


@dataclass(frozen=True)
class ProtobufFile:
    """A registered schema compiled: its file descriptor in its own pool."""

    registered: RegisteredSchema
    file: Any
    """`google.protobuf.descriptor.FileDescriptor`."""

    def message_at(self, indexes: Sequence[int]) -> Any:
        """The message descriptor at a Confluent message-index path; `RecordSchemaError` if none."""
        if not indexes:
            indexes = (0,)
        found: Any = None
        candidates = list(self.file.message_types_by_name.values())
        for depth, index in enumerate(indexes):
            if not 0 <= index < len(candidates):
                path = ",".join(str(i) for i in indexes)
                raise RecordSchemaError(
                    f"{self.registered.label} has no message at index path [{path}] (level {depth} has "
                    f"{len(candidates)} messages): the record was written with another schema"
                )
            found = candidates[index]
            candidates = list(found.nested_types)
        return found

    def message_named(self, name: str) -> Any:
        """The message descriptor of full name `name` (with or without the file's package)."""
        package = self.file.package
        for full in (name, f"{package}.{name}" if package else name):
            try:
                return self.file.pool.FindMessageTypeByName(full)
            except KeyError:
                continue
        known = ", ".join(self.file.message_types_by_name) or "none"
        raise RecordSchemaError(
            f"{self.registered.label} defines no message {name!r} (top-level messages: {known}): fix the "
            "mapping's value_message"
        )


def message_class(message: Any) -> Any:
    """The runtime's class for a message descriptor (upb where it is the implementation in use)."""
    return message_factory.GetMessageClass(message)


def compile_protobuf_schema(registered: RegisteredSchema, schemas: SchemaCache) -> ProtobufFile:
    """`registered` compiled with its references (see the module docstring). Raises
    `RecordSchemaError` naming the schema when it is not a Protobuf schema or does not compile, and
    `SchemaNotFoundError` when a reference is not in the registry."""
    label = registered.label
    if registered.schema_type.upper() != "PROTOBUF":
        raise RecordSchemaError(f"{label} is a {registered.schema_type} schema; the mapping reads protobuf")
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    texts: dict[str, str] = {}
    main_name = f"kafscale_schema_{registered.schema_id}.proto"
    _collect(registered, main_name, schemas, files, texts, depth=0)
    if texts:
        for compiled in _protoc(texts, label):
            files.setdefault(compiled.name, compiled)
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    _add(pool, main_name, files, added, label)
    return ProtobufFile(registered, pool.FindFileByName(main_name))


def _collect(
    schema: RegisteredSchema,
    name: str,
    schemas: SchemaCache,
    files: dict[str, descriptor_pb2.FileDescriptorProto],
    texts: dict[str, str],
    *,
    depth: int,
) -> None:
    """`schema` and its references, by import name: compiled descriptors in `files`, text in `texts`."""
    if depth > _MAX_REFERENCE_DEPTH:
        raise RecordSchemaError(f"{schema.label}: references nest deeper than {_MAX_REFERENCE_DEPTH}")
    serialized = _serialized(schema.text)
    if serialized is not None:
        serialized.name = name  # imports name files as the references do
        files[name] = serialized
    else:
        texts[name] = schema.text
    for reference in schema.references:
        if reference.name in files or reference.name in texts:
            continue
        referenced = schemas.version(reference.subject, reference.version)
        _collect(referenced, reference.name, schemas, files, texts, depth=depth + 1)


def _serialized(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The schema as a serialized `FileDescriptorProto` (base64), or None when it is `.proto` text."""
    stripped = text.strip()
    if not stripped or any(c in stripped for c in " ;{\n"):
        return None
    try:
        data = base64.b64decode(stripped, validate=True)
        return descriptor_pb2.FileDescriptorProto.FromString(data)
    except (binascii.Error, ValueError):
        return None
    except Exception:  # the runtime's DecodeError
        return None


def _add(
    pool: Any,
    name: str,
    files: dict[str, descriptor_pb2.FileDescriptorProto],
    added: set[str],
    label: str,
) -> None:
    """`name` added to `pool` after its dependencies (well-known types from the runtime)."""
    if name in added:
        return
    added.add(name)
    proto = files.get(name) or _well_known(name)
    if proto is None:
        raise RecordSchemaError(
            f"{label} imports {name!r}, which is neither in its references nor a well-known type: "
            "register it and list it in the schema's references"
        )
    for dependency in proto.dependency:
        _add(pool, dependency, files, added, label)
    try:
        pool.Add(proto)
    except (TypeError, ValueError) as exc:
        raise RecordSchemaError(f"{label}: {name} does not build: {exc}") from None


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    if not name.startswith("google/protobuf/"):
        return None
    for module in _WELL_KNOWN:
        importlib.import_module(f"google.protobuf.{module}")
    try:
        found = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        return None
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    return proto


def _protoc(texts: dict[str, str], label: str) -> list[descriptor_pb2.FileDescriptorProto]:
    """`.proto` texts (by import name) compiled with the bundled `protoc`, imports included."""
    try:
        from grpc_tools import protoc  # noqa: PLC0415 - only where a registry serves text
    except ImportError:
        raise RecordSchemaError(
            f"{label} is .proto text and grpcio-tools (its protoc) is not installed: install it, or use "
            "a registry that answers format=serialized"
        ) from None
    import grpc_tools  # noqa: PLC0415

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory(prefix="kafscale-proto-") as folder:
        root = Path(folder)
        for name, text in texts.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        out = root / "kafscale.descriptor-set"
        errors = root / "protoc.err"
        arguments = [
            "protoc",
            f"-I{root}",
            f"-I{include}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            *sorted(texts),
        ]
        with _PROTOC_LOCK, _stderr_to(errors):
            status = protoc.main(arguments)
        if status != 0:
            message = errors.read_text().replace(f"{root}{os.sep}", "").strip() or f"protoc exit {status}"
            raise RecordSchemaError(f"{label} is not valid .proto text: {message}")
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return list(descriptor_set.file)


class _stderr_to:  # noqa: N801 - a context manager used like a function
    """protoc writes its errors to file descriptor 2: catch them in a file while it runs."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._saved = -1

    def __enter__(self) -> None:
        self._saved = os.dup(2)
        target = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, 2)
        os.close(target)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
