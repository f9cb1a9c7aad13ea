"""Record framing inside a v2 batch, decoded only for compacted topics (the produce and
fetch paths of other topics never look past the batch header).

A record (after decompression of the batch's records area)::

    length          varint (zigzag)  bytes after this field
    attributes      int8             unused
    timestampDelta  varlong          from the batch's baseTimestamp
    offsetDelta     varint           from the batch's baseOffset
    keyLength       varint           -1: null key
    key             bytes
    valueLength     varint           -1: null value (a tombstone)
    value           bytes
    headers         varint count, then key/value pairs

Decompression is bounded (``DECOMPRESSED_BYTES_MAX``): a small batch cannot make the
broker allocate without limit.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tidegate.protocol.record_batch import HEADER_BYTES, BatchHeader

#: Largest records area one batch may decompress to.
DECOMPRESSED_BYTES_MAX = 32 * 1024 * 1024

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16
_U32 = struct.Struct(">I")


class InvalidRecordsError(ValueError):
    """The records of a batch cannot be decoded (bad framing, codec or size)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record: where its bytes lie in the decompressed records area and what the
    cleaner needs of it."""

    start: int
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise InvalidRecordsError("record runs past the end of its batch")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecordsError("varint longer than 10 bytes")


def _raw_snappy_length(block: bytes | memoryview) -> int:
    """The uncompressed length a raw snappy block declares (an unsigned varint)."""
    result = shift = 0
    for pos in range(min(len(block), 5)):
        b = block[pos]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise InvalidRecordsError("bad snappy block length")


def _snappy(data: bytes) -> bytes:
    from kafka.codec import snappy_decode

    total = 0
    if data[:8] == _XERIAL_MAGIC:  # Java's framing: blocks of u32 length + raw snappy
        pos = _XERIAL_HEADER_BYTES
        while pos < len(data):
            if pos + 4 > len(data):
                raise InvalidRecordsError("truncated snappy block")
            (size,) = _U32.unpack_from(data, pos)
            total += _raw_snappy_length(memoryview(data)[pos + 4 : pos + 4 + size])
            pos += 4 + size
    else:
        total = _raw_snappy_length(data)
    if total > DECOMPRESSED_BYTES_MAX:
        raise InvalidRecordsError(f"batch decompresses to more than {DECOMPRESSED_BYTES_MAX} bytes")
    return bytes(snappy_decode(data))


def decompress(codec: int, data: bytes) -> bytes:
    """The records area of a batch compressed with ``codec``, at most
    ``DECOMPRESSED_BYTES_MAX`` bytes."""
    limit = DECOMPRESSED_BYTES_MAX
    try:
        if codec == CODEC_NONE:
            out = data
        elif codec == CODEC_GZIP:
            out = zlib.decompressobj(wbits=47).decompress(data, limit + 1)
        elif codec == CODEC_SNAPPY:
            out = _snappy(data)
        elif codec == CODEC_LZ4:
            import lz4.frame

            out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=limit + 1)
        elif codec == CODEC_ZSTD:
            import zstandard

            out = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read(limit + 1)
        else:
            raise InvalidRecordsError(f"unknown compression codec {codec}")
    except InvalidRecordsError:
        raise
    except Exception as exc:  # each codec has its own error types
        raise InvalidRecordsError(f"cannot decompress the batch: {exc}") from None
    if len(out) > limit:
        raise InvalidRecordsError(f"batch decompresses to more than {limit} bytes")
    return bytes(out)


def records_area(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """The decompressed records of the whole batch ``batch`` (starting at its base
    offset field)."""
    return decompress(header.compression, bytes(batch[HEADER_BYTES : header.size]))


def iter_records(area: bytes, count: int) -> Iterator[Record]:
    """The ``count`` records of a decompressed records area; ``InvalidRecordsError`` if
    the framing does not add up."""
    pos = 0
    for _ in range(count):
        length, body = _varint(area, pos)
        end = body + length
        if length < 0 or end > len(area):
            raise InvalidRecordsError(f"record of {length} bytes runs past its batch")
        p = body + 1  # attributes
        ts_delta, p = _varint(area, p)
        offset_delta, p = _varint(area, p)
        key_len, p = _varint(area, p)
        key = None
        if key_len >= 0:
            key = area[p : p + key_len]
            p += key_len
        value_len, p = _varint(area, p)
        if p > end or (value_len > 0 and p + value_len > end):
            raise InvalidRecordsError("record fields run past the record")
        yield Record(pos, end, offset_delta, ts_delta, key, value_len < 0)
        pos = end
    if pos != len(area):
        raise InvalidRecordsError(f"{len(area) - pos} bytes after the last record")


#: Kafka's answer names at most this many record errors in the partition's message.
_SHOWN_ERRORS_MAX = 3


@dataclass(frozen=True, slots=True)
class RecordsRefused:
    """Why a batch is refused: the partition's message and, when single records are at
    fault, their index in the batch with a message each (ProduceResponse v8+
    ``record_errors``, so a client fails exactly those records with INVALID_RECORD)."""

    message: str
    record_errors: tuple[tuple[int, str], ...] = ()


def keyless_record_error(
    batch: bytes | memoryview, header: BatchHeader, where: str, area: bytes | None = None,
) -> RecordsRefused | None:
    """Kafka's INVALID_RECORD answer if records of the batch have no key (compacted
    topics take keyed records only: LogValidator's messages), or why the records cannot
    be read; None if all have keys. ``area``: the records area already decompressed."""
    try:
        plain = area if area is not None else records_area(batch, header)
        errors = tuple(
            (index, f"Compacted topic cannot accept message without key in topic partition {where}")
            for index, record in enumerate(iter_records(plain, header.record_count))
            if record.key is None
        )
    except InvalidRecordsError as exc:
        return RecordsRefused(f"Invalid records in topic partition {where}: {exc}")
    if not errors:
        return None
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:_SHOWN_ERRORS_MAX])
    return RecordsRefused(
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]", errors)


def compacted_produce_error(
    configs: Mapping[str, str], batch: bytes | memoryview, header: BatchHeader, topic: str,
    partition: int, area: bytes | None = None,
) -> RecordsRefused | None:
    """The produce path's one check for compacted topics (INVALID_RECORD), None for any
    other topic without reading past the header."""
    if "compact" not in configs.get("cleanup.policy", ""):
        return None
    return keyless_record_error(batch, header, f"{topic}-{partition}", area)
