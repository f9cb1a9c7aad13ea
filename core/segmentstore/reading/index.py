"""The read index: where each byte of a segment can be read from.

Per segment, a sorted list of cache entries (``starts`` + ``entries``); bytes not in it
come from Tier-2 (below the segment's storage length), from Tier-1 (a range whose data
the cache evicted before it reached Tier-2: the container's ``Tier1Index`` in RocksDB
records where its operations lie, and the entry leaves memory), or from a merged source
segment's index (a merge not yet concatenated in Tier-2). Entries never overlap, nor do
they overlap the segment's ranges in the ``Tier1Index``.

Tail reads wait on ``waiters``: futures completed whenever the segment grows or is
sealed.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing

from tidegate.core.segmentstore.api import DataCorruptionError
from tidegate.core.segmentstore.metadata import SegmentMeta
from tidegate.core.segmentstore.operations import Operation, OpKind
from tidegate.core.segmentstore.reading.cache import Cache, CacheEntry
from tidegate.core.segmentstore.reading.tier1index import Tier1Index, Tier1Range
from tidegate.core.segmentstore.tier1.api import DataLogCorruptError, LogAddress
from tidegate.tier2.api import BadOffsetError as Tier2BadOffset
from tidegate.tier2.api import DataMissingError, Storage, StorageError
from tidegate.tier2.api import SegmentNotFoundError as Tier2NotFound


class SegmentReadIndex:
    __slots__ = ("meta", "starts", "entries", "unflushed", "merges", "waiters", "cache", "tier1", "spilled")

    def __init__(self, meta: SegmentMeta, cache: Cache, tier1: Tier1Index) -> None:
        self.meta = meta
        self.cache = cache
        self.tier1 = tier1
        #: Ranges of this segment recorded in ``tier1`` (evicted, not yet in Tier-2).
        self.spilled = 0
        self.starts: list[int] = []
        self.entries: dict[int, CacheEntry] = {}
        #: Entries not yet in Tier-2, in offset order.
        self.unflushed: deque[CacheEntry] = deque()
        #: (target offset, length, source index) of merges not yet concatenated in Tier-2.
        self.merges: list[tuple[int, int, SegmentReadIndex]] = []
        self.waiters: list[asyncio.Future[None]] = []

    def add_append(
        self, offset: int, data: bytes | memoryview, op: Operation, last_seq: int = 0
    ) -> None:
        """Index data appended at the end (``offset`` past every entry), written by
        ``op`` (and, for a coalesced run, the operations of this segment up to
        ``last_seq``)."""
        self.add_entry(offset, data, op.address, op.frame_pos, op.seq, last_seq)

    def add_entry(
        self,
        offset: int,
        data: bytes | memoryview,
        address: LogAddress | None,
        frame_pos: int,
        seq: int,
        last_seq: int = 0,
    ) -> None:
        """``add_append`` for data written by the operations ``seq`` to ``last_seq``,
        the first of them at ``frame_pos`` in the Tier-1 frame at ``address``."""
        entry = CacheEntry(self, offset, data, address=address, frame_pos=frame_pos, seq=seq, last_seq=last_seq)
        self.starts.append(offset)
        self.entries[offset] = entry
        self.unflushed.append(entry)
        self.cache.add(entry)

    def add_block(self, offset: int, data: bytes) -> CacheEntry | None:
        """Cache a block read from Tier-2, unless it would overlap an entry by now."""
        end = offset + len(data)
        i = bisect.bisect_right(self.starts, offset)
        if i and self.entries[self.starts[i - 1]].end > offset:
            return None
        if i < len(self.starts) and self.starts[i] < end:
            return None
        entry = CacheEntry(self, offset, data)
        self.starts.insert(i, offset)
        self.entries[offset] = entry
        self.cache.add(entry)
        return entry

    def find(self, pos: int) -> CacheEntry | None:
        i = bisect.bisect_right(self.starts, pos)
        if i:
            entry = self.entries[self.starts[i - 1]]
            if entry.end > pos:
                return entry
        return None

    def next_start(self, pos: int) -> int:
        i = bisect.bisect_right(self.starts, pos)
        return self.starts[i] if i < len(self.starts) else 1 << 62

    def drop(self, entry: CacheEntry) -> None:
        """Remove an entry from the index (its data is already gone from the cache)."""
        if entry.removed:
            return
        entry.removed = True
        if self.entries.get(entry.start) is entry:
            del self.entries[entry.start]
            i = bisect.bisect_left(self.starts, entry.start)
            del self.starts[i]

    def spill(self, entry: CacheEntry) -> None:
        """The cache evicted the data of ``entry``, not yet in Tier-2: record where
        Tier-1 holds it and forget the entry."""
        if entry.removed:
            return
        address = entry.address
        assert address is not None, "an entry not in Tier-2 comes from Tier-1"
        self.tier1.put(
            self.meta.id,
            Tier1Range(entry.start, entry.end, entry.seq, entry.last_seq, address, entry.frame_pos),
        )
        self.spilled += 1
        self.drop(entry)
        q = self.unflushed
        while q and q[0].removed:
            q.popleft()

    def flushed_to(self, storage_length: int) -> None:
        """Entries below ``storage_length`` are in Tier-2 now."""
        q = self.unflushed
        while q and q[0].end <= storage_length:
            entry = q.popleft()
            if entry.removed:
                continue
            if entry.data is None:
                self.drop(entry)
            else:
                self.cache.mark_flushed(entry)
        if self.spilled:
            self.spilled -= self.tier1.drop_flushed(self.meta.id, storage_length)
        self.merges = [m for m in self.merges if m[0] + m[1] > storage_length]
        if self.starts and self.entries[self.starts[0]].end <= self.meta.start_offset:
            self.truncate(self.meta.start_offset)

    def truncate(self, start: int) -> None:
        """Forget every entry wholly below ``start`` that is already in Tier-2 (the
        storage writer still needs the others: Tier-2 offsets have no holes)."""
        limit = min(start, self.meta.storage_length)
        k = 0
        for s in self.starts:
            entry = self.entries[s]
            if entry.end > limit:
                break
            self.cache.discard(entry)
            entry.removed = True
            del self.entries[s]
            k += 1
        del self.starts[:k]

    def clear(self) -> None:
        for entry in self.entries.values():
            self.cache.discard(entry)
            entry.removed = True
        self.entries.clear()
        self.starts.clear()
        self.unflushed.clear()
        self.merges.clear()
        if self.spilled:
            self.tier1.drop_segment(self.meta.id)
            self.spilled = 0
        self.notify()

    def notify(self) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


#: ``tier1_read(address, frame_pos)``: the operations of Tier-1 from there on.
Tier1Reader = Callable[[LogAddress, int], AsyncGenerator[Operation, None]]

_DATA_KINDS = (OpKind.APPEND, OpKind.TABLE_WRITE, OpKind.TABLE_COMPACT)

#: Most bytes of segment data one Tier-1 read-back returns.
TIER1_READBACK_BYTES_MAX = 8 * 1024 * 1024


def _near(a: LogAddress, b: LogAddress) -> bool:
    """``b`` is close enough after ``a`` in Tier-1 that one pass reads both (the pass
    decodes every frame in between)."""
    return a.file_id == b.file_id and 0 <= b.position - a.position <= 2 * TIER1_READBACK_BYTES_MAX


class ReadIndex:
    """The read indexes of one container, and the I/O behind cache misses."""

    def __init__(
        self,
        cache: Cache,
        storage: Storage,
        tier1_read: Tier1Reader,
        read_block_bytes: int,
        read_attempts: int = 4,
        retry_delay_ms: int = 50,
    ) -> None:
        self._read_attempts = max(1, read_attempts)
        self._retry_delay_s = retry_delay_ms / 1000
        self.cache = cache
        self.storage = storage
        self._tier1_read = tier1_read
        self._read_block_bytes = read_block_bytes
        self.segments: dict[int, SegmentReadIndex] = {}
        #: Set by the container once its Tier-1 log is open (one per epoch).
        self.tier1: Tier1Index | None = None

    def get(self, meta: SegmentMeta) -> SegmentReadIndex:
        idx = self.segments.get(meta.id)
        if idx is None:
            assert self.tier1 is not None, "the container opens its Tier1Index first"
            idx = self.segments[meta.id] = SegmentReadIndex(meta, self.cache, self.tier1)
        return idx

    def remove(self, meta: SegmentMeta) -> None:
        idx = self.segments.pop(meta.id, None)
        if idx is not None:
            idx.clear()

    def clear_all(self) -> None:
        for idx in self.segments.values():
            idx.clear()
        self.segments.clear()

    def cached_prefix(self, idx: SegmentReadIndex, pos: int, end: int) -> list[memoryview] | None:
        """The fast path: ``[pos, end)`` wholly in cache, as slices; else None."""
        chunks: list[memoryview] = []
        while pos < end:
            entry = idx.find(pos)
            if entry is None or entry.data is None:
                return None
            stop = min(end, entry.end)
            chunks.append(memoryview(entry.data)[pos - entry.start : stop - entry.start])
            self.cache.touch(entry)
            pos = stop
        return chunks

    async def read(self, idx: SegmentReadIndex, pos: int, end: int) -> list[memoryview]:
        """Bytes ``[pos, end)`` of the segment (all of them; the caller checked bounds)."""
        fast = self.cached_prefix(idx, pos, end)
        if fast is not None:
            return fast
        meta = idx.meta
        chunks: list[memoryview] = []
        while pos < end:
            entry = idx.find(pos)
            if entry is not None and entry.data is not None:
                self.cache.touch(entry)
                stop = min(end, entry.end)
                chunks.append(memoryview(entry.data)[pos - entry.start : stop - entry.start])
                pos = stop
                continue
            nxt = idx.next_start(pos)
            if pos < meta.storage_length and not meta.tier2_stale:
                # One Tier-2 read, and so one cache entry, is at most a block: a large
                # fetch becomes several entries, each evictable on its own, instead of
                # one entry the size of the fetch that alone can exceed the bound.
                # Tier-2 need not read ahead into what the cache holds next.
                limit = min(meta.storage_length, nxt)
                stop = min(limit, pos + self._read_block_bytes)
                try:
                    block = await self._from_tier2(meta, pos, stop - pos, limit - stop)
                except DataCorruptionError:
                    if stop <= end:
                        raise
                    stop = end  # the read-ahead part may be what is damaged
                    block = await self._from_tier2(meta, pos, stop - pos, limit - stop)
                idx.add_block(pos, block)
                take = min(end, stop) - pos
                chunks.append(memoryview(block)[:take])
                pos += take
                continue
            spilled = idx.tier1.find(meta.id, pos) if idx.spilled else None
            if spilled is not None:
                try:
                    got = await self._from_tier1(idx, spilled, min(end, nxt))
                except (DataCorruptionError, DataLogCorruptError):
                    if pos < meta.storage_length and not meta.tier2_stale:
                        # Outrun: the writer moved the range to Tier-2 while we read
                        # and Tier-1 was truncated past it (its file deleted or reused).
                        continue
                    raise
                for r, data in got:
                    stop = min(end, r.end)
                    chunks.append(memoryview(data)[pos - r.start : stop - r.start])
                    pos = stop
                continue
            merge = next((m for m in idx.merges if m[0] <= pos < m[0] + m[1]), None)
            if merge is None:
                raise DataCorruptionError(meta.name, f"no source for offset {pos}")
            off, length, src = merge
            stop = min(end, nxt, off + length)
            try:
                chunks.extend(await self.read(src, pos - off, stop - off))
            except DataCorruptionError:
                # The storage writer may have concatenated the source into this segment
                # while we read (its metadata catches up a moment later): then the
                # bytes are in this segment's Tier-2 now.
                chunks.append(memoryview(await self._from_tier2(meta, pos, stop - pos)))
            pos = stop
        return chunks

    async def _from_tier2(
        self, meta: SegmentMeta, offset: int, length: int, read_ahead_max: int | None = None
    ) -> bytes:
        """Transient failures (plain ``StorageError``, ``OSError``) are retried; what
        remains is reported as ``DataCorruptionError``, never served as zeros."""
        for attempt in range(self._read_attempts):
            try:
                return await asyncio.to_thread(self.storage.read, meta.name, offset, length, read_ahead_max)
            except (DataMissingError, Tier2NotFound, Tier2BadOffset) as exc:
                raise DataCorruptionError(meta.name, f"Tier-2 data missing: {exc}") from exc
            except (StorageError, OSError) as exc:
                if attempt + 1 == self._read_attempts:
                    raise DataCorruptionError(meta.name, f"Tier-2 read failed: {exc}") from exc
                await asyncio.sleep(self._retry_delay_s * (attempt + 1))
        raise AssertionError("unreachable")

    async def _from_tier1(
        self, idx: SegmentReadIndex, first: Tier1Range, end: int
    ) -> list[tuple[Tier1Range, bytes]]:
        """Read back ``first`` and the evicted ranges right after it (below ``end``, at
        most ``TIER1_READBACK_BYTES_MAX`` in all) in one pass over Tier-1, starting at
        the frame that holds the first operation. Not cached again: the memory bound
        holds however much Tier-1 data is read; the storage writer reads each range
        once, and the OS page cache serves repeated reads."""
        wanted = [first]
        budget = TIER1_READBACK_BYTES_MAX - (first.end - first.start)
        for r in idx.tier1.ranges(idx.meta.id, first.end, end):
            if r.start != wanted[-1].end or budget <= 0 or not _near(first.address, r.address):
                break
            wanted.append(r)
            budget -= r.end - r.start
        seg_id = idx.meta.id
        out: list[tuple[Tier1Range, bytes]] = []
        pieces: list[bytes | memoryview] = []
        async with aclosing(self._tier1_read(first.address, first.frame_pos)) as ops:
            async for op in ops:
                r = wanted[len(out)]
                if op.seq < r.seq or op.segment_id != seg_id or op.kind not in _DATA_KINDS:
                    if op.seq > r.last_seq:
                        break
                    continue
                raw: bytes | memoryview | None = getattr(op, "data", None)
                if raw:
                    pieces.append(raw)
                if op.seq < r.last_seq:
                    continue
                data = b"".join(pieces)
                pieces = []
                if len(data) != r.end - r.start:
                    raise DataCorruptionError(idx.meta.name, f"Tier-1 operations {r.seq}..{r.last_seq} hold {len(data)} bytes, not {r.end - r.start}")
                out.append((r, data))
                if len(out) == len(wanted):
                    break
        if not out:
            raise DataCorruptionError(idx.meta.name, f"Tier-1 has no operation {first.seq}")
        return out
