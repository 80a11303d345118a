"""CRC-32C (Castagnoli), the checksum of Kafka record batches and of KafScale segment bodies.

Backed by the `crc32c` package (hardware-accelerated where the CPU has it). Kafka, KafScale's
footer and the Java client all use the Castagnoli polynomial, not zlib's CRC-32.
"""

from __future__ import annotations

from crc32c import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of `data` as an unsigned 32-bit int; pass a previous result as `value` to continue it."""
    return int(_crc32c(data, value))
