"""Table segments: key/value maps kept in a segment, indexed in memory.

A table segment's bytes are a sequence of serialized entries; a ``table_put`` or
``table_remove`` call appends one batch of them atomically (one TABLE_WRITE operation).
The segment goes to Tier-2 like any other. The in-memory index (key → value, version,
location) is the state after every committed entry; recovery rebuilds it by reading the
segment from its start offset to its end (Tier-2, then the replayed Tier-1 tail).

A key's version is the segment offset at which its current value was first written
(unique and increasing within a table). Compaction re-appends the live entries that lie
below the committed length, keeping their versions, then truncates the segment there
(one TABLE_COMPACT operation), so a table's size stays proportional to its live data.

Entry format (little-endian): u8 kind (0 put, 1 remove) | u32 key length |
u32 value length | i64 version | key | value.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator

from tidegate.core.segmentstore.api import NOT_EXISTS, TableEntry

_ENTRY = struct.Struct("<BIIq")
PUT = 0
REMOVE = 1


def encode(kind: int, key: bytes, value: bytes, version: int) -> bytes:
    return _ENTRY.pack(kind, len(key), len(value), version) + key + value


def entry_bytes(key: bytes, value: bytes) -> int:
    return _ENTRY.size + len(key) + len(value)


def decode(data: bytes | memoryview, base: int) -> Iterator[tuple[int, int, bytes, bytes, int]]:
    """(kind, location, key, value, version) for each entry; ``base`` is the segment
    offset of ``data[0]``."""
    buf = memoryview(data)
    pos = 0
    n = len(buf)
    while pos < n:
        kind, klen, vlen, version = _ENTRY.unpack_from(buf, pos)
        k0 = pos + _ENTRY.size
        key = bytes(buf[k0 : k0 + klen])
        value = bytes(buf[k0 + klen : k0 + klen + vlen])
        yield kind, base + pos, key, value, version
        pos = k0 + klen + vlen


class TableIndex:
    """One table's committed entries, plus the versions its queued writes will give."""

    __slots__ = ("entries", "pending", "live_bytes", "_sorted", "compacting")

    def __init__(self) -> None:
        #: key → (entry, location of its latest copy in the segment)
        self.entries: dict[bytes, tuple[TableEntry, int]] = {}
        #: key → (version after queued writes or NOT_EXISTS, number of queued writes)
        self.pending: dict[bytes, tuple[int, int]] = {}
        self.live_bytes = 0
        self._sorted: list[bytes] | None = None
        self.compacting = False

    def version(self, key: bytes) -> int:
        """The key's version once every queued write is applied (pending view)."""
        p = self.pending.get(key)
        if p is not None:
            return p[0]
        e = self.entries.get(key)
        return NOT_EXISTS if e is None else e[0].version

    def queue(self, key: bytes, version: int) -> None:
        p = self.pending.get(key)
        self.pending[key] = (version, 1 if p is None else p[1] + 1)

    def pending_empty(self) -> bool:
        if any(v != NOT_EXISTS for v, _ in self.pending.values()):
            return False
        return all(k in self.pending for k in self.entries)

    def apply(self, data: bytes | memoryview, base: int, *, queued: bool, compact: bool = False) -> None:
        """Apply committed entries. ``queued``: they went through ``queue`` (live
        operation, not replay). ``compact``: copies made by compaction."""
        for kind, loc, key, value, version in decode(data, base):
            if queued and not compact:
                p = self.pending[key]
                if p[1] == 1:
                    del self.pending[key]
                else:
                    self.pending[key] = (p[0], p[1] - 1)
            old = self.entries.get(key)
            if compact:
                if old is not None and old[0].version == version:
                    self.entries[key] = (old[0], loc)
                continue
            if old is not None:
                self.live_bytes -= entry_bytes(key, old[0].value)
            if kind == PUT:
                self.entries[key] = (TableEntry(key, value, version), loc)
                self.live_bytes += entry_bytes(key, value)
                if old is None:
                    self._sorted = None
            elif old is not None:
                del self.entries[key]
                self._sorted = None

    def get(self, key: bytes) -> TableEntry | None:
        e = self.entries.get(key)
        return None if e is None else e[0]

    def items(self, prefix: bytes) -> list[TableEntry]:
        keys = self._sorted
        if keys is None:
            keys = self._sorted = sorted(self.entries)
        if prefix:

            i = bisect.bisect_left(keys, prefix)
            out = []
            while i < len(keys) and keys[i].startswith(prefix):
                out.append(self.entries[keys[i]][0])
                i += 1
            return out
        return [self.entries[k][0] for k in keys]

    def compaction_data(self, below: int) -> bytes:
        """Live committed entries located below ``below`` with no queued change."""
        out = []
        for key, (entry, loc) in self.entries.items():
            if loc < below and key not in self.pending:
                out.append(encode(PUT, key, entry.value, entry.version))
        return b"".join(out)
