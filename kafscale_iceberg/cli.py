"""`kafscale-iceberg <group> <command> ...`: the command-line entry point.

Each group registers its commands in `_COMMAND_GROUPS`; each command is one function taking the
parsed arguments and returning the exit code. Errors this package raises on purpose end the
command with exit code 1 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafscale_iceberg.exceptions import KafscaleIcebergError

if TYPE_CHECKING:
    from kafscale_iceberg.segments.decode import DecodedSegment

Command = Callable[[argparse.Namespace], int]


def _bytes_field(name: str, data: bytes | None, *, base64_only: bool) -> dict[str, str | None]:
    """`{name: text}` for UTF-8 bytes (JSON, strings: what a person reads), else (or with
    `base64_only`) `{name_base64: ...}`, so binary payloads (Avro, Protobuf) survive intact."""
    if data is None:
        return {name: None}
    if not base64_only:
        try:
            return {name: data.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {f"{name}_base64": base64.b64encode(data).decode("ascii")}


def segments_inspect(args: argparse.Namespace) -> int:
    """Print a `.kfs` as JSON lines, one per record, or its header, footer, batches and index."""
    from kafscale_iceberg.segments.decode import decode_segment
    from kafscale_iceberg.segments.keys import infer_segment_key

    path = Path(args.path)
    data = path.read_bytes()
    source = str(path)
    parsed = infer_segment_key(source)
    partition = parsed.segment.partition if parsed is not None else None
    decoded = decode_segment(data, source=source, partition=partition, verify_crc=not args.no_verify)
    if args.summary:
        _print_json(_summary(decoded, path, size=len(data)))
        return 0
    _write_lines(_record_lines(decoded.records.to_pydict(), base64_only=args.base64))
    return 0


def _record_lines(columns: dict[str, list[Any]], *, base64_only: bool) -> Iterator[str]:
    for partition, offset, timestamp, key, value, headers in zip(
        columns["partition"],
        columns["offset"],
        columns["timestamp_ms"],
        columns["key"],
        columns["value"],
        columns["headers"],
        strict=True,
    ):
        yield json.dumps(
            {
                "partition": partition,
                "offset": offset,
                "timestamp_ms": timestamp,
                **_bytes_field("key", key, base64_only=base64_only),
                **_bytes_field("value", value, base64_only=base64_only),
                "headers": [
                    {"key": h["key"], **_bytes_field("value", h["value"], base64_only=base64_only)}
                    for h in headers
                ],
            }
        )


def _summary(decoded: DecodedSegment, path: Path, *, size: int) -> dict[str, Any]:
    from kafscale_iceberg.segments.layout import Codec, parse_index

    index_path = path.with_suffix(".index")
    index = None
    if index_path.exists():
        parsed = parse_index(index_path.read_bytes(), source=str(index_path))
        index = {
            "path": str(index_path),
            "interval": parsed.interval,
            "entries": [asdict(e) for e in parsed.entries],
        }
    return {
        "path": str(path),
        "size": size,
        "header": asdict(decoded.header),
        "footer": asdict(decoded.footer),
        "batch_count": decoded.batch_count,
        "record_count": decoded.record_count,
        "control_batches_skipped": decoded.control_batches_skipped,
        "payload_bytes": decoded.payload_bytes,
        "batches": [
            {
                "position": b.position,
                "base_offset": b.header.base_offset,
                "last_offset_delta": b.header.last_offset_delta,
                "record_count": b.header.record_count,
                "codec": Codec(b.header.codec_id).name.lower(),
                "timestamp_type": b.header.timestamp_type.name.lower(),
                "control": b.header.is_control,
                "size": b.header.size,
            }
            for b in decoded.batches
        ],
        "index": index,
    }


def segments_generate(args: argparse.Namespace) -> int:
    """Write synthetic pizza-order segments to a folder or S3 and print what was written as JSON."""
    from kafscale_iceberg.segments.generate import CodecChoice, generate_segments, write_segments
    from kafscale_iceberg.segments.layout import Codec
    from kafscale_iceberg.segments.lfs import ChecksumAlg

    codec: CodecChoice = "mixed" if args.codec == "mixed" else Codec[args.codec.upper()]
    lfs_bucket = args.lfs_bucket or (
        args.out.removeprefix("s3://").split("/")[0] if args.out.startswith("s3://") else "kafscale"
    )
    written = write_segments(
        args.out,
        generate_segments(
            topics=[t for t in args.topics.split(",") if t],
            partitions=args.partitions,
            segments=args.segments,
            batches_per_segment=args.batches_per_segment,
            records_per_batch=args.records_per_batch,
            codec=codec,
            seed=args.seed,
            namespace=args.namespace,
            headers=args.headers,
            lfs_every=args.lfs_every,
            lfs_blob_bytes=args.lfs_blob_bytes,
            lfs_bucket=lfs_bucket,
            lfs_checksum_alg=ChecksumAlg(args.lfs_checksum_alg),
            start_offset=args.start_offset,
        ),
        endpoint_url=args.endpoint_url,
    )
    _print_json(
        {
            "destination": args.out,
            "segments": [asdict(w) for w in written],
            "records": sum(w.records for w in written),
        }
    )
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _add_segments_commands(group: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inspect = group.add_parser("inspect", help="print a .kfs segment's records as JSON lines")
    inspect.add_argument("path", help="path of a .kfs file")
    inspect.add_argument("--no-verify", action="store_true", help="skip the CRC-32C checks")
    inspect.add_argument(
        "--summary", action="store_true", help="print header, footer, batches and the sibling .index instead"
    )
    inspect.add_argument(
        "--base64",
        action="store_true",
        help="print every key, value and header value as base64 (default: UTF-8 text as text, "
        "anything else base64 under `<field>_base64`)",
    )
    inspect.set_defaults(command=segments_inspect)

    generate = group.add_parser("generate", help="write synthetic pizza-order segments")
    generate.add_argument("--out", required=True, help="folder, or s3://bucket[/prefix]")
    generate.add_argument(
        "--endpoint-url", default=None, help="S3 endpoint override (MinIO, moto, LocalStack)"
    )
    generate.add_argument("--topics", default="orders", help="comma-separated topic names (default: orders)")
    generate.add_argument("--partitions", type=_positive_int, default=1)
    generate.add_argument("--segments", type=_positive_int, default=1, help="segments per partition")
    generate.add_argument("--batches-per-segment", type=_positive_int, default=4)
    generate.add_argument("--records-per-batch", type=_positive_int, default=100)
    generate.add_argument(
        "--codec", choices=["none", "gzip", "snappy", "lz4", "zstd", "mixed"], default="none"
    )
    generate.add_argument(
        "--start-offset",
        type=int,
        default=0,
        help="each partition's first offset (default 0); a later batch starts after the last one "
        "written, so it adds segments instead of overwriting them",
    )
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--namespace", default="default", help="KafScale namespace (first key component)")
    generate.add_argument("--headers", action="store_true", help="add content-type and trace-id headers")
    generate.add_argument(
        "--lfs-every",
        type=int,
        default=0,
        help="every Nth record goes through KafScale's LFS proxy: a blob plus an envelope (default 0: none)",
    )
    generate.add_argument("--lfs-blob-bytes", type=_positive_int, default=256 * 1024, help="LFS blob size")
    generate.add_argument(
        "--lfs-bucket",
        default="",
        help="bucket the envelopes name (default: the --out bucket, or 'kafscale')",
    )
    generate.add_argument(
        "--lfs-checksum-alg",
        choices=("sha256", "md5", "crc32", "none"),
        default="sha256",
        help="envelope checksum",
    )
    generate.set_defaults(command=segments_generate)


_COMMAND_GROUPS: dict[
    str, tuple[str, Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]]
] = {
    "segments": ("read and write KafScale segment files", _add_segments_commands),
}

_COMMANDS: dict[str, str] = {
    "run": "run the pipeline in this process (continuously, or --once)",
    "demo": "the whole pipeline on embedded services, with checks (no AWS account)",
    "status": "per topic and partition: offsets, lag, lease, failures",
    "history": "a topic's snapshots; the snapshot holding an offset, with SQL",
    "replay": "re-enqueue a topic's segments; --reset-offsets rebuilds the range",
    "redrive": "land a topic's dead letters again after the mapping was fixed, once",
    "maintain": "compact the tables, expire snapshots, delete orphan files",
    "cost": "a fleet of topics' monthly AWS bill, per line item, beside Firehose's",
}
"""Top-level commands (`kafscale-iceberg run ...`): name -> help. Each is the module
`kafscale_iceberg.commands.<name>`, whose `add_arguments` adds its arguments and `command`; only
the module of the command asked for is imported, so a command loads only what it uses."""


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every command and command group registered; the arguments of
    the top-level command `argv` names (all of them when `argv` is None)."""
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    parser = argparse.ArgumentParser(prog="kafscale-iceberg")
    groups = parser.add_subparsers(dest="group", required=True, metavar="<command>")
    for name, help_text in _COMMANDS.items():
        command_parser = groups.add_parser(name, help=help_text)
        command_parser.set_defaults(name="")
        if chosen is None or chosen == name:
            importlib.import_module(f"kafscale_iceberg.commands.{name}").add_arguments(command_parser)
    for name, (help_text, add_commands) in _COMMAND_GROUPS.items():
        group_parser = groups.add_parser(name, help=help_text)
        add_commands(group_parser.add_subparsers(dest="name", required=True, metavar="<command>"))
    return parser


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _write_lines(lines: Iterator[str]) -> None:
    write = sys.stdout.write
    for line in lines:
        write(line)
        write("\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    command: Command = args.command
    try:
        return command(args)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining again
        # when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (KafscaleIcebergError, OSError) as exc:
        where = " ".join(part for part in (args.group, args.name) if part)
        print(f"kafscale-iceberg {where}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
