"""Log operations and their serialized form.

Every change to a container is one operation, validated against the container metadata
when the call is made, given a sequence number, serialized into the durable log and
applied (metadata, read index, storage writer) once durable. Conditions (expected
offsets, attribute values, key versions) are checked before logging, so a logged
operation is unconditional: replay applies it as written.

Wire format of one operation (little-endian), as it appears in the data-frame stream::

    u32 length of what follows | u8 kind | u64 sequence number | body

Bodies (``attrs`` = u16 count, then per attribute u16 key length, UTF-8 key, i64 value;
``data`` = u32 length, then the bytes, always last so they can be sliced out in place):

    CREATE         u64 segment id, u8 is_table, u16 name length, name, attrs
    APPEND         u64 segment id, u64 offset, attrs, data
    ATTRS          u64 segment id, attrs
    SEAL           u64 segment id
    TRUNCATE       u64 segment id, u64 offset
    MERGE          u64 target id, u64 source id, u64 offset, u64 length
    DELETE         u64 segment id
    TABLE_WRITE    u64 segment id, u64 offset, data (serialized table entries)
    TABLE_COMPACT  u64 segment id, u64 offset, u64 new start offset, data
    CHECKPOINT     data (serialized container metadata)
    MAP            data (one segment's record, as in a checkpoint: an inactive
                   segment brought back into memory, ``metastore.py``)
"""

from __future__ import annotations

import asyncio
import struct
from enum import IntEnum
from typing import Any

from tidegate.core.segmentstore.callbacks import DoneCallback
from tidegate.core.segmentstore.tier1.api import LogAddress


class OpKind(IntEnum):
    CREATE = 1
    APPEND = 2
    ATTRS = 3
    SEAL = 4
    TRUNCATE = 5
    MERGE = 6
    DELETE = 7
    TABLE_WRITE = 8
    TABLE_COMPACT = 9
    CHECKPOINT = 10
    MAP = 11


_HEAD = struct.Struct("<IBQ")  # length, kind, seq
_U64 = struct.Struct("<Q")
_U64x2 = struct.Struct("<QQ")
_U64x3 = struct.Struct("<QQQ")
_U64x4 = struct.Struct("<QQQQ")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_CREATE = struct.Struct("<QBH")

Attrs = tuple[tuple[str, int], ...]


class Operation:
    """One logged change. ``seq`` is assigned when the operation is queued; ``address``
    and ``frame_pos`` (where its first byte lies in Tier-1) once its frame is durable."""

    __slots__ = ("seq", "segment_id", "name", "future", "on_done", "address", "frame_pos", "result")
    kind: OpKind

    def __init__(self, segment_id: int, name: str) -> None:
        self.seq = 0
        self.segment_id = segment_id
        self.name = name
        self.future: asyncio.Future[Any] | None = None
        #: Called by the durable log right after it completes ``future`` (no loop hop).
        self.on_done: DoneCallback | None = None
        self.address: LogAddress | None = None
        self.frame_pos = 0
        self.result: Any = None

    def body(self) -> list[bytes | memoryview]:
        raise NotImplementedError


def _attrs(attrs: Attrs) -> bytes:
    out = [_U16.pack(len(attrs))]
    for key, value in attrs:
        k = key.encode()
        out.append(_U16.pack(len(k)))
        out.append(k)
        out.append(_I64.pack(value))
    return b"".join(out)


def _read_attrs(buf: memoryview, pos: int) -> tuple[Attrs, int]:
    (count,) = _U16.unpack_from(buf, pos)
    pos += 2
    out = []
    for _ in range(count):
        (klen,) = _U16.unpack_from(buf, pos)
        pos += 2
        key = bytes(buf[pos : pos + klen]).decode()
        pos += klen
        (value,) = _I64.unpack_from(buf, pos)
        pos += 8
        out.append((key, value))
    return tuple(out), pos


class CreateOp(Operation):
    __slots__ = ("is_table", "attributes")
    kind = OpKind.CREATE

    def __init__(self, segment_id: int, name: str, is_table: bool, attributes: Attrs) -> None:
        super().__init__(segment_id, name)
        self.is_table = is_table
        self.attributes = attributes

    def body(self) -> list[bytes | memoryview]:
        n = self.name.encode()
        return [_CREATE.pack(self.segment_id, self.is_table, len(n)), n, _attrs(self.attributes)]


class AppendOp(Operation):
    """An append; ``data`` is dropped (set to ``None``) once the read index holds it."""

    __slots__ = ("offset", "length", "data", "attributes", "event_count")
    kind = OpKind.APPEND

    def __init__(
        self,
        segment_id: int,
        name: str,
        offset: int,
        data: bytes | memoryview,
        attributes: Attrs = (),
        event_count: int = 1,
    ) -> None:
        # Operation.__init__ inlined: this is the per-append hot path.
        self.seq = 0
        self.segment_id = segment_id
        self.name = name
        self.future = None
        self.on_done = None
        self.address = None
        self.frame_pos = 0
        self.result = None
        self.offset = offset
        self.length = len(data)
        self.data: bytes | memoryview | None = data
        self.attributes = attributes
        self.event_count = event_count

    def body(self) -> list[bytes | memoryview]:
        assert self.data is not None
        head = _U64x2.pack(self.segment_id, self.offset)
        if self.attributes:
            head += _attrs(self.attributes)
        else:
            head += b"\0\0"
        return [head + _U32.pack(self.length), self.data]


class AttrsOp(Operation):
    __slots__ = ("attributes",)
    kind = OpKind.ATTRS

    def __init__(self, segment_id: int, name: str, attributes: Attrs) -> None:
        super().__init__(segment_id, name)
        self.attributes = attributes

    def body(self) -> list[bytes | memoryview]:
        return [_U64.pack(self.segment_id), _attrs(self.attributes)]


class SealOp(Operation):
    __slots__ = ()
    kind = OpKind.SEAL

    def body(self) -> list[bytes | memoryview]:
        return [_U64.pack(self.segment_id)]


class TruncateOp(Operation):
    __slots__ = ("offset",)
    kind = OpKind.TRUNCATE

    def __init__(self, segment_id: int, name: str, offset: int) -> None:
        super().__init__(segment_id, name)
        self.offset = offset

    def body(self) -> list[bytes | memoryview]:
        return [_U64x2.pack(self.segment_id, self.offset)]


class MergeOp(Operation):
    """Append all of source (``length`` bytes, sealed) to target at ``offset``; the
    source is gone afterwards. ``segment_id`` is the target."""

    __slots__ = ("source_id", "offset", "length")
    kind = OpKind.MERGE

    def __init__(self, target_id: int, name: str, source_id: int, offset: int, length: int) -> None:
        super().__init__(target_id, name)
        self.source_id = source_id
        self.offset = offset
        self.length = length

    def body(self) -> list[bytes | memoryview]:
        return [_U64x4.pack(self.segment_id, self.source_id, self.offset, self.length)]


class DeleteOp(Operation):
    __slots__ = ()
    kind = OpKind.DELETE

    def body(self) -> list[bytes | memoryview]:
        return [_U64.pack(self.segment_id)]


class TableWriteOp(Operation):
    """Serialized table entries appended to a table segment at ``offset``. ``entries``
    holds them decoded while the operation lives in memory."""

    __slots__ = ("offset", "length", "data", "entries")
    kind = OpKind.TABLE_WRITE

    def __init__(self, segment_id: int, name: str, offset: int, data: bytes) -> None:
        super().__init__(segment_id, name)
        self.offset = offset
        self.length = len(data)
        self.data: bytes | memoryview | None = data
        self.entries: Any = None

    def body(self) -> list[bytes | memoryview]:
        assert self.data is not None
        return [_U64x2.pack(self.segment_id, self.offset) + _U32.pack(self.length), self.data]


class TableCompactOp(TableWriteOp):
    """Live entries re-appended at ``offset``, then the segment truncated at
    ``new_start`` (at or below ``offset``)."""

    __slots__ = ("new_start",)
    kind = OpKind.TABLE_COMPACT

    def __init__(self, segment_id: int, name: str, offset: int, new_start: int, data: bytes) -> None:
        super().__init__(segment_id, name, offset, data)
        self.new_start = new_start

    def body(self) -> list[bytes | memoryview]:
        assert self.data is not None
        head = _U64x3.pack(self.segment_id, self.offset, self.new_start) + _U32.pack(self.length)
        return [head, self.data]


class CheckpointOp(Operation):
    __slots__ = ("data",)
    kind = OpKind.CHECKPOINT

    def __init__(self, data: bytes) -> None:
        super().__init__(0, "<checkpoint>")
        self.data = data

    def body(self) -> list[bytes | memoryview]:
        return [_U32.pack(len(self.data)), self.data]


class MapOp(Operation):
    """An inactive segment back in memory, with its record (``metadata.encode_segment``)."""

    __slots__ = ("data",)
    kind = OpKind.MAP

    def __init__(self, record: bytes) -> None:
        super().__init__(_U64.unpack_from(record, 0)[0], "")
        self.data = record

    def body(self) -> list[bytes | memoryview]:
        return [_U32.pack(len(self.data)), self.data]


#: Head + APPEND body without attributes: length, kind, seq, segment id, offset,
#: attribute count (0), data length.
APPEND_PLAIN = struct.Struct("<IBQQQHI")
_APPEND_BODY = struct.Struct("<QQHI")

#: An append without attributes as recovery reads it, without an ``AppendOp``: (seq,
#: segment id, offset, data (a slice of its Tier-1 frame), frame address, position of
#: its record in the frame).
PlainAppend = tuple[int, int, int, memoryview, LogAddress, int]


def serialize(op: Operation) -> tuple[list[bytes | memoryview], int]:
    """The operation's record as parts (payloads are not copied), and its size."""
    if op.kind is OpKind.APPEND:
        assert isinstance(op, AppendOp) and op.data is not None
        if not op.attributes:
            n = op.length
            head = APPEND_PLAIN.pack(APPEND_PLAIN.size - 4 + n, 2, op.seq, op.segment_id, op.offset, 0, n)
            return [head, op.data], APPEND_PLAIN.size + n
    body = op.body()
    size = 9 + sum(len(p) for p in body)
    return [_HEAD.pack(size, op.kind, op.seq), *body], size + 4


HEAD_BYTES = _HEAD.size


def record_length(buf: memoryview | bytes | bytearray, pos: int) -> int:
    """Total bytes of the record starting at ``pos`` (its u32 prefix included)."""
    return int(_U32.unpack_from(buf, pos)[0]) + 4


def parse_at(buf: memoryview, pos: int, size: int) -> Operation:
    """``parse(buf[pos : pos + size])``, with plain appends (the bulk of a replay)
    decoded in one unpack and without slicing the record first."""
    if size >= APPEND_PLAIN.size and buf[pos + 4] == 2:
        _, _, seq, sid, offset, nattrs, n = APPEND_PLAIN.unpack_from(buf, pos)
        if nattrs == 0:
            start = pos + APPEND_PLAIN.size
            op = AppendOp(sid, "", offset, buf[start : start + n])
            op.seq = seq
            return op
    return parse(buf[pos : pos + size])


def parse(rec: memoryview) -> Operation:
    """Decode one whole record (as ``serialize`` made it). Payloads stay slices of
    ``rec``."""
    _, kind, seq = _HEAD.unpack_from(rec, 0)
    p = HEAD_BYTES
    op: Operation
    if kind == 2:  # APPEND, the common case first
        sid, offset, nattrs, n = _APPEND_BODY.unpack_from(rec, p)
        if nattrs == 0:
            p += _APPEND_BODY.size
            op = AppendOp(sid, "", offset, rec[p : p + n])
            op.seq = seq
            return op
    if kind == OpKind.APPEND:
        sid, offset = _U64x2.unpack_from(rec, p)
        attrs, p = _read_attrs(rec, p + 16)
        (n,) = _U32.unpack_from(rec, p)
        op = AppendOp(sid, "", offset, rec[p + 4 : p + 4 + n], attrs)
    elif kind == OpKind.TABLE_WRITE:
        sid, offset = _U64x2.unpack_from(rec, p)
        (n,) = _U32.unpack_from(rec, p + 16)
        op = TableWriteOp(sid, "", offset, b"")
        op.data = rec[p + 20 : p + 20 + n]
        op.length = n
    elif kind == OpKind.TABLE_COMPACT:
        sid, offset, new_start = _U64x3.unpack_from(rec, p)
        (n,) = _U32.unpack_from(rec, p + 24)
        op = TableCompactOp(sid, "", offset, new_start, b"")
        op.data = rec[p + 28 : p + 28 + n]
        op.length = n
    elif kind == OpKind.CREATE:
        sid, is_table, nlen = _CREATE.unpack_from(rec, p)
        p += _CREATE.size
        name = bytes(rec[p : p + nlen]).decode()
        attrs, _ = _read_attrs(rec, p + nlen)
        op = CreateOp(sid, name, bool(is_table), attrs)
    elif kind == OpKind.ATTRS:
        (sid,) = _U64.unpack_from(rec, p)
        attrs, _ = _read_attrs(rec, p + 8)
        op = AttrsOp(sid, "", attrs)
    elif kind == OpKind.SEAL:
        op = SealOp(_U64.unpack_from(rec, p)[0], "")
    elif kind == OpKind.TRUNCATE:
        sid, offset = _U64x2.unpack_from(rec, p)
        op = TruncateOp(sid, "", offset)
    elif kind == OpKind.MERGE:
        tid, sid, offset, length = _U64x4.unpack_from(rec, p)
        op = MergeOp(tid, "", sid, offset, length)
    elif kind == OpKind.DELETE:
        op = DeleteOp(_U64.unpack_from(rec, p)[0], "")
    elif kind == OpKind.CHECKPOINT:
        (n,) = _U32.unpack_from(rec, p)
        op = CheckpointOp(bytes(rec[p + 4 : p + 4 + n]))
    elif kind == OpKind.MAP:
        (n,) = _U32.unpack_from(rec, p)
        op = MapOp(bytes(rec[p + 4 : p + 4 + n]))
    else:
        raise ValueError(f"unknown operation kind {kind}")
    op.seq = seq
    return op
