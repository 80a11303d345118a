"""Protobuf messages for tests, made the way a producer makes them: `.proto` text compiled by protoc
(grpcio-tools' bundled one) into a descriptor set, classes from the protobuf runtime. Independent of
the decoder under test, which reads schemas from a registry."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc


def compile_proto(files: dict[str, str]) -> descriptor_pool.DescriptorPool:
    """A pool holding `files` (import name -> `.proto` text) and what they import."""
    include = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory() as folder:
        for name, text in files.items():
            (Path(folder) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / name).write_text(text)
        out = Path(folder) / "set.pb"
        arguments = [
            "protoc",
            f"-I{folder}",
            f"-I{include}",
            "--include_imports",
            f"--descriptor_set_out={out}",
        ]
        status = protoc.main([*arguments, *files])
        assert status == 0, f"protoc failed on {list(files)}"
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in descriptor_set.file:
        pool.Add(proto)
    return pool


def message(pool: descriptor_pool.DescriptorPool, name: str) -> Any:
    """The runtime's class of message `name` in `pool`."""
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
