"""KafScale segment files: S3 keys, byte layouts, and (in submodules) the codec.

Importing this package stays light (standard library only), because the router Lambda uses the
keys and the 16-byte footer check. The codec needs the `codec` extra and lives in submodules:
`decode` (`decode_segment`; `iter_records`, a public record-by-record API for tooling), `encode`
(`encode_record_batch`, `build_segment`), `compression`, `crc`, `scan` (the compiled record walker)
and `generate` (synthetic segments).
"""

from kafscale_iceberg.segments.keys import (
    SegmentId,
    SegmentObject,
    SegmentObjectKind,
    format_segment_key,
    infer_segment_key,
    match_segment_key,
    parse_segment_key,
)
from kafscale_iceberg.segments.layout import (
    FOOTER_MAGIC,
    FOOTER_SIZE,
    HEADER_SIZE,
    BatchHeader,
    Codec,
    IndexEntry,
    SegmentFooter,
    SegmentHeader,
    SegmentIndex,
    TimestampType,
    parse_footer,
    parse_header,
    parse_index,
)

__all__ = [
    "FOOTER_MAGIC",
    "FOOTER_SIZE",
    "HEADER_SIZE",
    "BatchHeader",
    "Codec",
    "IndexEntry",
    "SegmentFooter",
    "SegmentHeader",
    "SegmentId",
    "SegmentIndex",
    "SegmentObject",
    "SegmentObjectKind",
    "TimestampType",
    "format_segment_key",
    "infer_segment_key",
    "match_segment_key",
    "parse_footer",
    "parse_header",
    "parse_index",
    "parse_segment_key",
]
