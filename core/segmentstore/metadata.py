"""Container and segment metadata, in two views.

*Pending* fields (``p_*``) describe the segment after every operation queued so far;
calls are validated against them, synchronously, so a call's conditions hold at its
place in the log. *Committed* fields describe it after the operations that are durable;
reads and ``get_info`` use them. Both views advance in log order; a failed frame stops
the container, so pending changes never need rolling back.

Checkpoint format (the body of a CHECKPOINT operation; little-endian)::

    u64 sequence number | u64 next segment id | u32 segment count | segments...
    segment: u64 id | u8 is_table | u8 sealed | u64 length | u64 start offset |
             i64 last modified ms | u16 name length | name | attrs (as in operations)
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from tidegate.core.segmentstore.api import SegmentNotFoundError
from tidegate.core.segmentstore.operations import _attrs, _read_attrs


class SegmentMeta:
    __slots__ = (
        "id", "name", "is_table", "created", "deleted",
        "length", "start_offset", "sealed", "attributes", "last_modified_ms",
        "storage_length", "tier2_stale", "merged_into",
        "p_length", "p_start", "p_sealed", "p_deleted", "p_attributes", "last_read_ms", "p_ops",
    )  # fmt: skip

    def __init__(self, seg_id: int, name: str, is_table: bool, attributes: dict[str, int]) -> None:
        self.id = seg_id
        self.name = name
        self.is_table = is_table
        self.created = False  # the CREATE is durable
        self.deleted = False  # a DELETE or MERGE (as source) is durable
        self.length = 0
        self.start_offset = 0
        self.sealed = False
        self.attributes = dict(attributes)
        self.last_modified_ms = 0
        #: Bytes below this offset are in Tier-2 (set by recovery and the writer).
        self.storage_length = 0
        #: Tier-2 may still hold an earlier segment of the same name (deleted, with the
        #: deletion not yet applied there); the writer clears this.
        self.tier2_stale = False
        #: For a merge source: (target, offset in target, length), once durable.
        self.merged_into: tuple[SegmentMeta, int, int] | None = None
        self.p_length = 0
        self.p_start = 0
        self.p_sealed = False
        self.p_deleted = False
        self.p_attributes = dict(attributes)
        #: Wall-clock ms of the last read; with ``last_modified_ms``, how long the
        #: segment has been idle (inactive segments leave memory: ``metastore.py``).
        self.last_read_ms = 0
        #: Operations of this segment queued and not yet durable.
        self.p_ops = 0


_CKPT_HEAD = struct.Struct("<QQI")
_CKPT_SEG = struct.Struct("<QBBQQqH")


@dataclass
class Checkpoint:
    seq: int
    next_id: int
    segments: list[SegmentMeta]


class ContainerMetadata:
    def __init__(self) -> None:
        #: Live segments by name, pending view (includes segments whose CREATE is not yet
        #: durable; excludes those whose DELETE is queued).
        self.by_name: dict[str, SegmentMeta] = {}
        #: Every segment operations may still refer to, by id.
        self.by_id: dict[int, SegmentMeta] = {}
        self.next_id = 1
        self.seq = 0
        #: Brings an inactive segment of that name back into memory (the container's
        #: ``activate``); None if there is none.
        self.activate: Callable[[str], SegmentMeta | None] | None = None

    def lookup(self, name: str) -> SegmentMeta | None:
        """The live segment of that name (pending view), activated if inactive."""
        meta = self.by_name.get(name)
        if meta is None and self.activate is not None:
            meta = self.activate(name)
        return meta

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def mutable(self, name: str, is_table: bool = False) -> SegmentMeta:
        """The live segment (pending view) of that kind, or ``SegmentNotFoundError``."""
        meta = self.lookup(name)
        if meta is None or meta.is_table != is_table:
            raise SegmentNotFoundError(name)
        return meta

    def readable(self, name: str, is_table: bool = False) -> SegmentMeta:
        """The segment as durable (committed view), or ``SegmentNotFoundError``."""
        return durable_view(name, self.lookup(name), is_table)

    def new_segment(self, name: str, is_table: bool, attributes: dict[str, int]) -> SegmentMeta:
        meta = SegmentMeta(self.next_id, name, is_table, attributes)
        self.next_id += 1
        self.by_name[name] = meta
        self.by_id[meta.id] = meta
        return meta

    def forget(self, meta: SegmentMeta) -> None:
        """Drop a segment the log and the writer are done with."""
        if self.by_id.get(meta.id) is meta:
            del self.by_id[meta.id]
        if self.by_name.get(meta.name) is meta:
            del self.by_name[meta.name]

    # -- checkpoints --------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The pending view as a checkpoint body: the state once every queued operation
        is applied, which is the state at the checkpoint's place in the log."""
        live = [m for m in self.by_name.values() if not m.p_deleted]
        out = [_CKPT_HEAD.pack(self.seq, self.next_id, len(live))]
        out += [encode_segment(m) for m in live]
        return b"".join(out)

    def restore(self, data: bytes) -> None:
        """Replace everything with a checkpoint's state (committed and pending alike)."""
        buf = memoryview(data)
        seq, next_id, count = _CKPT_HEAD.unpack_from(buf, 0)
        pos = _CKPT_HEAD.size
        self.by_name.clear()
        self.by_id.clear()
        for _ in range(count):
            m, pos = decode_segment(buf, pos)
            self.by_name[m.name] = m
            self.by_id[m.id] = m
        self.seq = max(self.seq, seq)
        self.next_id = next_id


def durable_view(name: str, meta: SegmentMeta | None, is_table: bool = False) -> SegmentMeta:
    """``meta`` if it is a created, undeleted segment of that kind, else
    ``SegmentNotFoundError``."""
    if meta is None or meta.is_table != is_table or not meta.created or meta.deleted:
        raise SegmentNotFoundError(name)
    return meta


def encode_segment(m: SegmentMeta) -> bytes:
    """One segment's record in the pending view, as checkpoints hold it (also the body
    of a MAP operation and a row of the inactive segments' store)."""
    name = m.name.encode()
    return b"".join(
        (
            _CKPT_SEG.pack(
                m.id, m.is_table, m.p_sealed, m.p_length, m.p_start,
                m.last_modified_ms, len(name),
            ),  # fmt: skip
            name,
            _attrs(tuple(m.p_attributes.items())),
        )
    )


def decode_segment(buf: memoryview | bytes, pos: int = 0) -> tuple[SegmentMeta, int]:
    """A segment made from its record (durable: committed and pending views alike), and
    the position after the record."""
    buf = memoryview(buf)
    sid, is_table, sealed, length, start, modified, nlen = _CKPT_SEG.unpack_from(buf, pos)
    pos += _CKPT_SEG.size
    name = bytes(buf[pos : pos + nlen]).decode()
    attrs, pos = _read_attrs(buf, pos + nlen)
    m = SegmentMeta(sid, name, bool(is_table), dict(attrs))
    m.created = True
    m.length = m.p_length = length
    m.start_offset = m.p_start = start
    m.sealed = m.p_sealed = bool(sealed)
    m.last_modified_ms = modified
    return m, pos
