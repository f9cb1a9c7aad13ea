"""Kafka framing and request/response headers: bytes in, bytes out.

Wire facts:
- Every request and response is a frame: a signed 32-bit big-endian size, then that
  many bytes.
- A request frame starts with the request header: api key (int16), api version (int16),
  correlation id (int32), client id (nullable int16-length string, never compact), and,
  in header v2 (the flexible versions of the API), tagged fields.
- A response starts with the response header: correlation id (int32) and, in header v1
  (flexible versions), tagged fields. ApiVersions responses always use header v0 (a
  quirk: clients must be able to read the answer before they know the broker's versions).

Headers are parsed and encoded here directly (a few struct calls: every request pays
for them, and kafka-python's generic ``RequestHeader`` decoder costs far more). Tests
check both against kafka-python's classes for every version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidegate.protocol.errors import KafkaProtocolError

SIZE_PREFIX_BYTES = 4
_SIZE = struct.Struct(">i")
_FIXED_HEADER = struct.Struct(">hhi")


def frame_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The body length announced by the 4-byte size prefix at ``pos`` of ``buf``
    (negative sizes are invalid)."""
    (size,) = _SIZE.unpack_from(buf, pos)
    if size < 0:
        raise KafkaProtocolError(f"negative frame size {size}")
    return int(size)


@dataclass(frozen=True, slots=True)
class ParsedRequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: Offset in the frame where the request body starts.
    body_offset: int


def peek_request_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``: the fixed part of every header version."""
    if len(frame) < _FIXED_HEADER.size:
        raise KafkaProtocolError(f"frame of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
    return int(key), int(version), int(correlation_id)


def parse_request_header(
    frame: bytes | bytearray | memoryview, flexible: bool
) -> ParsedRequestHeader:
    """Parse the request header (v2 if ``flexible`` else v1) at the start of ``frame``."""
    n = len(frame)
    if n < _HEADER_V1.size:
        raise KafkaProtocolError(f"frame of {n} bytes is shorter than a header")
    key, version, correlation_id, client_len = _HEADER_V1.unpack_from(frame, 0)
    pos = _HEADER_V1.size
    client_id: str | None = None
    if client_len >= 0:
        end = pos + client_len
        if end > n:
            raise KafkaProtocolError("request header runs past the frame")
        try:
            client_id = bytes(memoryview(frame)[pos:end]).decode()
        except UnicodeDecodeError as exc:
            raise KafkaProtocolError(f"bad request header: client id {exc}") from None
        pos = end
    elif client_len != -1:
        raise KafkaProtocolError(f"bad request header: client id length {client_len}")
    if flexible:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
            if pos > n:
                raise KafkaProtocolError("request header runs past the frame")
    return ParsedRequestHeader(int(key), int(version), int(correlation_id), client_id, pos)


_HEADER_V1 = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")
_TAGGED_NONE = b"\x00"


def _uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: its value and the position after it."""
    value = shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise KafkaProtocolError("request header runs past the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise KafkaProtocolError("bad request header: varint too long")


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """The response header: v1 (with an empty tagged-field section) if ``flexible``."""
    head = _CORRELATION.pack(correlation_id)
    return head + _TAGGED_NONE if flexible else head


def size_prefix(length: int) -> bytes:
    return _SIZE.pack(length)
