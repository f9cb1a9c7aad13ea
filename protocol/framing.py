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

Header parsing uses kafka-python's ``RequestHeader``/``ResponseHeader`` classes.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from kafka.protocol.api_header import RequestHeader, ResponseHeader

from protocol.errors import KafkaProtocolError

SIZE_PREFIX_BYTES = 4
_SIZE = struct.Struct(">i")
_FIXED_HEADER = struct.Struct(">hhi")


def frame_size(prefix: bytes) -> int:
    """The body length announced by a 4-byte size prefix (negative sizes are invalid)."""
    (size,) = _SIZE.unpack(prefix)
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


def peek_request_header(frame: bytes | bytearray) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``: the fixed part of every header version."""
    if len(frame) < _FIXED_HEADER.size:
        raise KafkaProtocolError(f"frame of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
    return int(key), int(version), int(correlation_id)


def parse_request_header(frame: bytes | bytearray, flexible: bool) -> ParsedRequestHeader:
    """Parse the request header (v2 if ``flexible`` else v1) at the start of ``frame``.

    The header is parsed from a copy of the frame's first ``_HEADER_PROBE_BYTES`` (a
    ``BytesIO`` over a whole ``bytearray`` frame would copy all of it, e.g. a 1 MB
    Produce); a header longer than that (a huge client id or tagged fields) is parsed
    from the whole frame."""
    if len(frame) > _HEADER_PROBE_BYTES:
        try:
            probed = _parse_request_header(bytes(memoryview(frame)[:_HEADER_PROBE_BYTES]), flexible)
            if probed.body_offset < _HEADER_PROBE_BYTES:  # ended inside the probe: whole
                return probed
        except KafkaProtocolError:
            pass
    return _parse_request_header(bytes(frame), flexible)


#: Request headers are parsed from this many leading bytes first.
_HEADER_PROBE_BYTES = 4096


def _parse_request_header(frame: bytes, flexible: bool) -> ParsedRequestHeader:
    stream = io.BytesIO(frame)  # shares an immutable ``bytes`` without a copy
    try:
        header = RequestHeader.decode(stream, flexible=flexible)
    except Exception as exc:  # the codec raises struct.error, ValueError, UnicodeError...
        raise KafkaProtocolError(f"bad request header: {exc!r}") from exc
    end = stream.tell()
    if end > len(frame):
        raise KafkaProtocolError("request header runs past the frame")
    return ParsedRequestHeader(
        api_key=int(header.request_api_key),
        api_version=int(header.request_api_version),
        correlation_id=int(header.correlation_id),
        client_id=header.client_id,
        body_offset=end,
    )


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """The response header: v1 (with an empty tagged-field section) if ``flexible``."""
    return bytes(ResponseHeader(correlation_id=correlation_id).encode(flexible=flexible))


def size_prefix(length: int) -> bytes:
    return _SIZE.pack(length)
