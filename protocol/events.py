"""How events are framed in the segments of streams outside the Kafka scope.

As Pravega frames them: a big-endian int32 type and int32 length, then the payload.
Type 0 is a plain event (Pravega's ``EVENT``: the payload is the event); type 1 is
tidegate's keyed event, whose payload is a uint16 key length, the UTF-8 routing key and
the event. Appends are whole frames, so a segment's length is always a frame boundary.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

PLAIN = 0
KEYED = 1
HEADER = struct.Struct(">ii")
_KEY_LENGTH = struct.Struct(">H")
#: The largest event payload (key included) a writer may append or a reader accepts.
EVENT_BYTES_MAX = 1 << 20
KEY_BYTES_MAX = 0xFFFF


class EventFormatError(ValueError):
    """Bytes that are not framed events (a damaged segment, or not an event stream)."""


@dataclass(frozen=True, slots=True)
class Event:
    #: The event's position: where its frame starts in the segment.
    offset: int
    routing_key: str | None
    data: bytes


def frame(data: bytes, routing_key: str | None) -> bytes:
    """One event's frame; raises ``ValueError`` when it is too large."""
    if routing_key is None:
        payload = bytes(data)
        kind = PLAIN
    else:
        key = routing_key.encode()
        if len(key) > KEY_BYTES_MAX:
            raise ValueError(f"routing key of {len(key)} bytes is longer than {KEY_BYTES_MAX}")
        payload = _KEY_LENGTH.pack(len(key)) + key + bytes(data)
        kind = KEYED
    if len(payload) > EVENT_BYTES_MAX:
        raise ValueError(f"event of {len(payload)} bytes is larger than {EVENT_BYTES_MAX}")
    return HEADER.pack(kind, len(payload)) + payload


def whole_length(buf: bytes | bytearray | memoryview, limit: int) -> tuple[int, int]:
    """``(bytes, needed)``: the length of the whole frames at the start of ``buf`` that
    fit in ``limit``, and, when not even the first fits, the first frame's size (else 0)."""
    view = memoryview(buf)
    pos = 0
    while pos + HEADER.size <= len(view):
        kind, length = HEADER.unpack_from(view, pos)
        _check(kind, length, pos)
        end = pos + HEADER.size + length
        if end > len(view) or end > limit:
            return pos, (HEADER.size + length if pos == 0 else 0)
        pos = end
    return pos, (HEADER.size if pos == 0 and len(view) < HEADER.size else 0)


def parse(buf: bytes | bytearray | memoryview, offset: int) -> Iterator[Event]:
    """The events of whole frames ``buf`` read at segment ``offset``."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        if pos + HEADER.size > len(view):
            raise EventFormatError(f"a partial frame header at offset {offset + pos}")
        kind, length = HEADER.unpack_from(view, pos)
        _check(kind, length, offset + pos)
        body = pos + HEADER.size
        if body + length > len(view):
            raise EventFormatError(f"a partial event at offset {offset + pos}")
        if kind == PLAIN:
            yield Event(offset + pos, None, bytes(view[body:body + length]))
        else:
            (key_len,) = _KEY_LENGTH.unpack_from(view, body)
            if key_len + _KEY_LENGTH.size > length:
                raise EventFormatError(f"a routing key longer than its event at offset {offset + pos}")
            key_end = body + _KEY_LENGTH.size + key_len
            try:
                key = bytes(view[body + _KEY_LENGTH.size:key_end]).decode()
            except UnicodeDecodeError:
                raise EventFormatError(f"a routing key not UTF-8 at offset {offset + pos}") from None
            yield Event(offset + pos, key, bytes(view[key_end:body + length]))
        pos = body + length


def _check(kind: int, length: int, at: int) -> None:
    if kind not in (PLAIN, KEYED) or not 0 <= length <= EVENT_BYTES_MAX + KEY_BYTES_MAX + 2:
        raise EventFormatError(f"no event frame at offset {at} (type {kind}, length {length})")
