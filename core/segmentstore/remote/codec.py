"""Frames of the segment-store wire protocol (the remote side of ``SegmentStore``).

Every frame is ``u32 length`` (big-endian, of what follows) then ``u32 request id``,
``u8 code`` and a MessagePack array. Requests carry an operation code and its arguments;
answers carry the request's id, ``OK`` or ``ERROR`` and the result (or the error's class
name, segment, message and its extra field). A connection carries many requests at once;
answers come back as each completes, matched by id. Appends on one connection are
applied in the order their frames arrived, as local calls are in call order.
"""

from __future__ import annotations

import enum
import struct
from typing import Any

import msgpack
from tidegate.core.segmentstore.api import (
    AttributeUpdate,
    BadAttributeUpdateError,
    BadKeyVersionError,
    BadOffsetError,
    ContainerNotOwnedError,
    DataCorruptionError,
    ReadResult,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentProperties,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTraffic,
    SegmentTruncatedError,
    StoreShutdownError,
    TableEntry,
    TableNotEmptyError,
    TableRemoval,
    TableUpdate,
    TooLargeError,
)

LENGTH = struct.Struct(">I")
HEADER = struct.Struct(">IB")
#: A frame's bound besides its payload (names, attributes, headers).
FRAME_OVERHEAD_BYTES_MAX = 1 << 20


class Op(enum.IntEnum):
    CREATE_SEGMENT = 1
    APPEND = 2
    UPDATE_ATTRIBUTES = 3
    READ = 4
    GET_INFO = 5
    SEAL = 6
    TRUNCATE = 7
    MERGE = 8
    DELETE_SEGMENT = 9
    TRAFFIC = 10
    CREATE_TABLE = 11
    DELETE_TABLE = 12
    TABLE_PUT = 13
    TABLE_REMOVE = 14
    TABLE_GET = 15
    TABLE_ENTRIES = 16


OK = 0
ERROR = 1

_ERRORS: dict[str, type[SegmentStoreError]] = {
    cls.__name__: cls
    for cls in (
        SegmentStoreError, SegmentNotFoundError, SegmentExistsError, SegmentSealedError,
        BadOffsetError, SegmentTruncatedError, BadAttributeUpdateError, BadKeyVersionError,
        TableNotEmptyError, ContainerNotOwnedError, DataCorruptionError, StoreShutdownError,
        TooLargeError,
    )
}  # fmt: skip


class ProtocolError(Exception):
    """A frame that does not follow this protocol; the connection is closed."""


def frame(request_id: int, code: int, body: Any) -> bytes:
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    return LENGTH.pack(HEADER.size + len(payload)) + HEADER.pack(request_id, code) + payload


def parse(data: bytes | memoryview) -> tuple[int, int, Any]:
    """A frame's content (after its length): request id, code, body."""
    if len(data) < HEADER.size:
        raise ProtocolError(f"a frame of {len(data)} bytes has no header")
    request_id, code = HEADER.unpack_from(data)
    try:
        body = msgpack.unpackb(data[HEADER.size :], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable frame body: {exc}") from exc
    return request_id, code, body


# -- values -----------------------------------------------------------------------------


def attribute_updates(updates: Any) -> list[AttributeUpdate]:
    return [AttributeUpdate(str(k), int(v), None if e is None else int(e)) for k, v, e in updates]


def encode_attribute_updates(updates: Any) -> list[list[Any]]:
    return [[u.key, u.value, u.expected] for u in updates]


def table_updates(updates: Any) -> list[TableUpdate]:
    return [TableUpdate(bytes(k), bytes(v), None if e is None else int(e)) for k, v, e in updates]


def encode_table_updates(updates: Any) -> list[list[Any]]:
    return [[u.key, u.value, u.expected_version] for u in updates]


def table_removals(removals: Any) -> list[TableRemoval]:
    return [TableRemoval(bytes(k), None if e is None else int(e)) for k, e in removals]


def encode_table_removals(removals: Any) -> list[list[Any]]:
    return [[r.key, r.expected_version] for r in removals]


def encode_entry(entry: TableEntry | None) -> list[Any] | None:
    return None if entry is None else [entry.key, entry.value, entry.version]


def entry(value: Any) -> TableEntry | None:
    return None if value is None else TableEntry(bytes(value[0]), bytes(value[1]), int(value[2]))


def encode_properties(p: SegmentProperties) -> list[Any]:
    return [
        p.name, p.length, p.storage_length, p.start_offset, p.sealed, dict(p.attributes),
        p.last_modified_ms,
    ]  # fmt: skip


def properties(v: Any) -> SegmentProperties:
    name, length, storage_length, start, sealed, attributes, modified = v
    return SegmentProperties(name, length, storage_length, start, sealed, attributes, modified)


def encode_read(r: ReadResult) -> list[Any]:
    return [r.offset, b"".join(r.chunks), r.end_of_segment]


def read_result(v: Any) -> ReadResult:
    offset, data, end = v
    return ReadResult(offset, [memoryview(data)] if data else [], end)


def encode_traffic(t: SegmentTraffic) -> list[float]:
    return [t.bytes_per_second, t.events_per_second]


def traffic(v: Any) -> SegmentTraffic:
    return SegmentTraffic(float(v[0]), float(v[1]))


# -- errors -----------------------------------------------------------------------------


def encode_error(exc: SegmentStoreError) -> list[Any]:
    extra: Any = None
    if isinstance(exc, BadOffsetError):
        extra = exc.actual
    elif isinstance(exc, BadKeyVersionError):
        extra = exc.key
    message = str(exc)
    prefix = f"{exc.segment}: "
    return [type(exc).__name__, exc.segment, message[len(prefix) :] if message.startswith(prefix) else "", extra]


def error(v: Any) -> SegmentStoreError:
    """The error an answer carries, as the class the server raised (the base class for a
    name this side does not know)."""
    name, segment, message, extra = v
    cls = _ERRORS.get(name, SegmentStoreError)
    if issubclass(cls, BadOffsetError):
        return cls(segment, message, actual=int(extra) if extra is not None else -1)
    if issubclass(cls, BadKeyVersionError):
        return cls(segment, bytes(extra or b""), message)
    return cls(segment, message)
