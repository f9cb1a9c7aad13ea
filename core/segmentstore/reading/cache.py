"""The cache: segment data held in memory, bounded by ``cache_bytes_max``.

One cache serves every container of a node. An entry is a contiguous range of one
segment: the bytes of one append (kept as the caller's own immutable buffer: not
copied), of a run of small appends committed together (joined: one entry instead of
many), or of one block read from Tier-2.
Each entry is charged its length plus ``ENTRY_OVERHEAD_BYTES``.

Eviction, when over the bound: least recently used entries already in Tier-2 first
(they are dropped; Tier-2 serves them again), then the oldest entries not yet in Tier-2
(dropped too, their Tier-1 location recorded in the container's ``Tier1Index``, so reads
and the storage writer fetch them back from Tier-1). That second kind is kept rare: past
``crowded_bytes`` of data not yet in Tier-2 the store holds acknowledgements back
(``StorageWriter.wait_lag``) until the writers have flushed.

Blocks read from Tier-2 are kept apart, as the kernel's page cache keeps pages read once
on its inactive list: while they take more than ``blocks_bytes_max`` of a full cache they
are evicted before anything else. A reader catching up through old data would otherwise
push out the recent data that tail readers are served from, and every block it read
would evict recent data it then had to read from the disk too.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Protocol

from tidegate.core.segmentstore.tier1.api import LogAddress

#: Rough memory of an entry's Python objects besides its payload.
ENTRY_OVERHEAD_BYTES = 200


#: A slice of a larger buffer is copied when the buffer exceeds the slice by more than
#: this factor (plus ``SLICE_SLACK_BYTES``): kept as a slice, the whole buffer would stay
#: alive while the cache charged only the slice.
SLICE_PIN_FACTOR = 2
SLICE_SLACK_BYTES = 4096


def _owned(data: bytes | memoryview) -> bytes | memoryview:
    """``data`` itself, or a copy if it is a small view pinning a much larger buffer, so
    what an entry is charged is what it holds."""
    if isinstance(data, memoryview):
        with memoryview(data.obj) as base:
            if base.nbytes > SLICE_PIN_FACTOR * data.nbytes + SLICE_SLACK_BYTES:
                return bytes(data)
    return data


class EntryOwner(Protocol):
    """What eviction tells the segment read index an entry belongs to
    (``SegmentReadIndex``); called with the entry's data already dropped."""

    def drop(self, entry: CacheEntry) -> None:
        """Forget the entry: its range is read from Tier-2 again."""

    def spill(self, entry: CacheEntry) -> None:
        """The entry's range is not in Tier-2 yet: read it back from Tier-1."""


class CacheEntry:
    """Every cache entry lives until evicted, so it is the bulk of what the garbage
    collector's full collections scan: it holds no object of its own besides ``data``
    (its Tier-1 address as two ints, not a ``LogAddress``)."""

    __slots__ = (
        "index", "start", "end", "data", "file_id", "position", "frame_pos", "seq", "last_seq", "flushed",
        "removed",
    )  # fmt: skip

    def __init__(
        self,
        index: EntryOwner,
        start: int,
        data: bytes | memoryview,
        *,
        address: LogAddress | None = None,
        frame_pos: int = 0,
        seq: int = 0,
        last_seq: int = 0,
    ) -> None:
        self.index = index
        self.start = start
        self.end = start + len(data)
        self.data: bytes | memoryview | None = _owned(data)
        #: Where in Tier-1 the operation that wrote these bytes lies (file -1: from Tier-2).
        if address is None:
            self.file_id = self.position = -1
        else:
            self.file_id, self.position = address.file_id, address.position
        self.frame_pos = frame_pos
        #: The operations (of this segment, sequence numbers ``seq..last_seq``) whose
        #: bytes this entry holds: one append, or a run of small ones coalesced.
        self.seq = seq
        self.last_seq = max(seq, last_seq)
        self.flushed = address is None
        self.removed = False

    @property
    def address(self) -> LogAddress | None:
        return None if self.file_id < 0 else LogAddress(self.file_id, self.position)


class Cache:
    def __init__(
        self, cache_bytes_max: int, unflushed_share_max: float = 1.0, blocks_share_max: float = 1.0
    ) -> None:
        self.bytes_max = cache_bytes_max
        self.used_bytes = 0
        #: Bytes held of data not yet in Tier-2 (the storage writer flushes early when
        #: this passes half the bound, so eviction rarely has to drop such data).
        self.unflushed_bytes = 0
        #: Past this many unflushed bytes the cache is ``crowded``: the store holds back
        #: acknowledgements (``wait_room``) until the storage writers flush.
        self.crowded_bytes = int(cache_bytes_max * unflushed_share_max)
        self._room_waiters: list[asyncio.Future[None]] = []
        #: Bytes of data not yet in Tier-2 evicted so far (to be read back from Tier-1).
        self.spilled_bytes = 0
        self._flushed: OrderedDict[CacheEntry, None] = OrderedDict()
        self._unflushed: OrderedDict[CacheEntry, None] = OrderedDict()
        #: Blocks read from Tier-2 (entries without a Tier-1 address), in LRU order.
        self._blocks: OrderedDict[CacheEntry, None] = OrderedDict()
        self.blocks_bytes = 0
        #: A full cache keeps at most this many bytes of blocks read from Tier-2.
        self.blocks_bytes_max = int(cache_bytes_max * blocks_share_max)

    def __len__(self) -> int:
        return len(self._flushed) + len(self._unflushed) + len(self._blocks)

    def _lru(self, entry: CacheEntry) -> OrderedDict[CacheEntry, None]:
        if not entry.flushed:
            return self._unflushed
        return self._blocks if entry.file_id < 0 else self._flushed

    def add(self, entry: CacheEntry) -> None:
        assert entry.data is not None
        n = entry.end - entry.start + ENTRY_OVERHEAD_BYTES
        if entry.file_id < 0:
            self._blocks[entry] = None
            self.blocks_bytes += n
        elif entry.flushed:
            self._flushed[entry] = None
        else:
            self._unflushed[entry] = None
            self.unflushed_bytes += n
        self.used_bytes += n
        if self.used_bytes > self.bytes_max:
            self.evict()

    @property
    def under_pressure(self) -> bool:
        return self.unflushed_bytes * 2 > self.bytes_max

    @property
    def crowded(self) -> bool:
        return self.unflushed_bytes > self.crowded_bytes

    def wait_room(self) -> asyncio.Future[None]:
        """Done once the cache is no longer ``crowded``."""
        fut = asyncio.get_running_loop().create_future()
        if self.crowded:
            self._room_waiters.append(fut)
        else:
            fut.set_result(None)
        return fut

    def _unflushed_gone(self, n: int) -> None:
        """``n`` charged bytes of data not yet in Tier-2 left the cache (flushed,
        discarded or evicted): wake whoever waits for room."""
        self.unflushed_bytes -= n
        if self._room_waiters and not self.crowded:
            waiters, self._room_waiters = self._room_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def touch(self, entry: CacheEntry) -> None:
        if entry.flushed:
            lru = self._lru(entry)
            if entry in lru:
                lru.move_to_end(entry)

    def mark_flushed(self, entry: CacheEntry) -> None:
        if entry.flushed:
            return
        entry.flushed = True
        if self._unflushed.pop(entry, 0) is None:
            self._flushed[entry] = None
            self._unflushed_gone(entry.end - entry.start + ENTRY_OVERHEAD_BYTES)

    def discard(self, entry: CacheEntry) -> None:
        """Forget an entry's data (the index drops the entry itself)."""
        if entry.data is None:
            return
        lru = self._lru(entry)
        if lru.pop(entry, 0) is None:
            n = entry.end - entry.start + ENTRY_OVERHEAD_BYTES
            self.used_bytes -= n
            if lru is self._blocks:
                self.blocks_bytes -= n
            elif not entry.flushed:
                self._unflushed_gone(n)
        entry.data = None

    def evict(self) -> None:
        while self.used_bytes > self.bytes_max:
            if self._blocks and (self.blocks_bytes > self.blocks_bytes_max or not self._flushed):
                entry, _ = self._blocks.popitem(last=False)
                n = entry.end - entry.start + ENTRY_OVERHEAD_BYTES
                self.used_bytes -= n
                self.blocks_bytes -= n
                entry.data = None
                entry.index.drop(entry)
            elif self._flushed:
                entry, _ = self._flushed.popitem(last=False)
                self.used_bytes -= entry.end - entry.start + ENTRY_OVERHEAD_BYTES
                entry.data = None
                entry.index.drop(entry)
            elif self._unflushed:
                entry, _ = self._unflushed.popitem(last=False)
                n = entry.end - entry.start + ENTRY_OVERHEAD_BYTES
                self.used_bytes -= n
                self.spilled_bytes += n
                entry.data = None
                entry.index.spill(entry)  # to be read back from Tier-1
                self._unflushed_gone(n)
            else:
                return
