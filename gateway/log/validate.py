"""Record-level checks of a produced batch, as Kafka's LogValidator makes them: a batch
that consumers cannot read is never stored.

The batch header was checked already (magic 2, lengths, CRC-32C:
``protocol.record_batch``). Here:

- the codec is one of Kafka's (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd);
- the records decompress, to at most ``decompressed_bytes_max`` bytes (bounded by
  what the client sent: a small compressed batch may not take gigabytes);
- the records are framed as the format says (varint lengths, keys, values, headers
  with UTF-8 keys), exactly ``recordCount`` of them fill the records section, and their
  offset deltas are 0, 1, 2, ... (offsets stay dense).

The walk is in C (``_recordwalk.c``, built with the package; no object per record),
else aiokafka's record-batch reader (Cython, an object per record: a fifth more server
CPU for 100-byte records). The batch is never rewritten: what is stored is what the
client sent.
"""

from __future__ import annotations

import io
import struct
import types
import zlib

import cramjam
import lz4.frame
import zstandard
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.record_batch import HEADER_BYTES, BatchHeader

_recordwalk: types.ModuleType | None
try:
    from tidegate.gateway.log import _recordwalk
except ImportError:  # built without a compiler
    _recordwalk = None

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_ATTRIBUTES_AT = 21
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16
_BLOCK_LENGTH = struct.Struct(">i")


class RecordsError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def validate_records(
    records: memoryview, batch: BatchHeader, decompressed_bytes_max: int
) -> bytes | None:
    """Raise ``RecordsError`` (CORRUPT_MESSAGE or INVALID_RECORD, with a message) if the
    records of ``batch`` (at its ``position`` in ``records``) are not what it says. A
    compressed batch's decompressed records area is returned (the topic's config checks
    read it instead of decompressing again), None for an uncompressed one."""
    codec = batch.compression
    if codec >= len(CODECS):
        raise RecordsError(
            ErrorCode.CORRUPT_MESSAGE,
            f"unknown compression codec {codec} (Kafka's are 0-4: {', '.join(CODECS)})",
        )
    view = records[batch.position : batch.position + batch.size]
    if codec:
        try:
            plain = _decompress(codec, view[HEADER_BYTES:], decompressed_bytes_max)
        except RecordsError:
            raise
        except Exception as exc:  # each codec library raises its own errors
            raise RecordsError(
                ErrorCode.CORRUPT_MESSAGE, f"{CODECS[codec]} records do not decompress: {exc}"
            ) from None
        # The reader takes a whole batch: the header, marked uncompressed, then the records.
        head = bytearray(view[:HEADER_BYTES])
        head[_ATTRIBUTES_AT + 1] &= ~0x07
        view = memoryview(bytes(head) + plain)
        _walk(view, batch)
        return plain
    _walk(view, batch)
    return None


def _walk(view: memoryview, batch: BatchHeader) -> None:
    if _recordwalk is not None:
        try:
            _recordwalk.walk(view[HEADER_BYTES:], batch.record_count)
        except ValueError as exc:
            reason = str(exc)
            code = ErrorCode.INVALID_RECORD if "offset delta is not" in reason else (
                ErrorCode.CORRUPT_MESSAGE)
            raise RecordsError(
                code, f"records of a batch of {batch.record_count} are malformed: {reason}"
            ) from None
        return
    expected = batch.base_offset
    try:
        for record in DefaultRecordBatch(view):
            if record.offset != expected:
                raise RecordsError(
                    ErrorCode.INVALID_RECORD,
                    f"record {expected - batch.base_offset} has offset delta "
                    f"{record.offset - batch.base_offset}: deltas must be 0, 1, 2, ...",
                )
            expected += 1
    except RecordsError:
        raise
    except UnicodeDecodeError:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"record {expected - batch.base_offset} has a header key that is not UTF-8",
        ) from None
    except (CorruptRecordException, ValueError, IndexError) as exc:
        raise RecordsError(
            ErrorCode.CORRUPT_MESSAGE,
            f"record {expected - batch.base_offset} of {batch.record_count} is malformed: "
            f"{_reason(exc)}",
        ) from None


def _reason(exc: Exception) -> str:
    text = str(exc)
    return text.removeprefix("[Error 2] CorruptRecordException: ")


def _decompress(codec: int, data: memoryview, limit: int) -> bytes:
    if codec == 1:
        return _gunzip(data, limit)
    if codec == 2:
        return _unsnappy(data, limit)
    if codec == 3:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out = decompressor.decompress(bytes(data), max_length=limit + 1)
        _check_size(len(out), limit)
        if not decompressor.eof:
            raise RecordsError(ErrorCode.CORRUPT_MESSAGE, "lz4 records end inside a frame")
        return bytes(out)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    out = reader.read(limit + 1)
    _check_size(len(out), limit)
    return bytes(out)


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise RecordsError(
            ErrorCode.INVALID_RECORD, f"records decompress to more than {limit} bytes"
        )


def _gunzip(data: memoryview, limit: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while rest:  # gzip members may follow each other
        decompressor = zlib.decompressobj(wbits=47)  # gzip or zlib header
        out += decompressor.decompress(rest, limit + 1 - len(out))
        _check_size(len(out), limit)
        if not decompressor.eof:
            raise RecordsError(ErrorCode.CORRUPT_MESSAGE, "gzip records end inside a member")
        rest = decompressor.unused_data
    return bytes(out)


def _unsnappy(data: memoryview, limit: int) -> bytes:
    """Raw snappy, or the xerial framing Java clients write (a magic header, then blocks
    each with a 4-byte length). Each block's size is read before it is decompressed."""
    if bytes(data[:8]) != _XERIAL_MAGIC:
        return _snappy_block(data, limit)
    out = bytearray()
    pos = _XERIAL_HEADER_BYTES
    while pos < len(data):
        if len(data) - pos < 4:
            raise RecordsError(ErrorCode.CORRUPT_MESSAGE, "snappy block length cut short")
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise RecordsError(ErrorCode.CORRUPT_MESSAGE, "snappy block runs past the records")
        out += _snappy_block(data[pos : pos + length], limit - len(out))
        pos += length
    return bytes(out)


def _snappy_block(block: memoryview, limit: int) -> bytes:
    size, shift = 0, 0
    for byte in block[:5]:  # the uncompressed length: a varint
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    else:
        raise RecordsError(ErrorCode.CORRUPT_MESSAGE, "snappy block length is not a varint")
    _check_size(size, limit)
    return bytes(cramjam.snappy.decompress_raw(bytes(block)))
