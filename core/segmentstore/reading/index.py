"""The read index: where each byte of a segment can be read from.

Per segment, a sorted list of cache entries (``starts`` + ``entries``); bytes not in it
come from Tier-2 (below the segment's storage length), from a merged source segment's
index (a merge not yet concatenated in Tier-2), or from Tier-1 (an entry whose data was
evicted before it reached Tier-2 keeps its Tier-1 address). Entries never overlap.

Tail reads wait on ``waiters``: futures completed whenever the segment grows or is
sealed.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Awaitable, Callable

from core.segmentstore.api import DataCorruptionError
from core.segmentstore.metadata import SegmentMeta
from core.segmentstore.operations import Operation
from core.segmentstore.reading.cache import Cache, CacheEntry
from tier2.api import DataMissingError, Storage, StorageError


class SegmentReadIndex:
    __slots__ = ("meta", "starts", "entries", "unflushed", "merges", "waiters", "cache")

    def __init__(self, meta: SegmentMeta, cache: Cache) -> None:
        self.meta = meta
        self.cache = cache
        self.starts: list[int] = []
        self.entries: dict[int, CacheEntry] = {}
        #: Entries not yet in Tier-2, in offset order.
        self.unflushed: deque[CacheEntry] = deque()
        #: (target offset, length, source index) of merges not yet concatenated in Tier-2.
        self.merges: list[tuple[int, int, SegmentReadIndex]] = []
        self.waiters: list[asyncio.Future[None]] = []

    def add_append(self, offset: int, data: bytes | memoryview, op: Operation) -> None:
        """Index data appended at the end (``offset`` past every entry)."""
        entry = CacheEntry(self, offset, data, address=op.address, frame_pos=op.frame_pos, seq=op.seq)
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
        self.merges = [m for m in self.merges if m[0] + m[1] > storage_length]

    def truncate(self, start: int) -> None:
        """Forget every entry wholly below ``start``."""
        k = 0
        for s in self.starts:
            entry = self.entries[s]
            if entry.end > start:
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
        self.notify()

    def notify(self) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


Tier1Reader = Callable[[CacheEntry], Awaitable[Operation]]


class ReadIndex:
    """The read indexes of one container, and the I/O behind cache misses."""

    def __init__(
        self, cache: Cache, storage: Storage, tier1_read: Tier1Reader, read_block_bytes: int
    ) -> None:
        self.cache = cache
        self.storage = storage
        self._tier1_read = tier1_read
        self._read_block_bytes = read_block_bytes
        self.segments: dict[int, SegmentReadIndex] = {}

    def get(self, meta: SegmentMeta) -> SegmentReadIndex:
        idx = self.segments.get(meta.id)
        if idx is None:
            idx = self.segments[meta.id] = SegmentReadIndex(meta, self.cache)
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
            if entry is not None:
                data = entry.data
                if data is None:
                    data = await self._from_tier1(idx, entry)
                else:
                    self.cache.touch(entry)
                stop = min(end, entry.end)
                chunks.append(memoryview(data)[pos - entry.start : stop - entry.start])
                pos = stop
                continue
            nxt = idx.next_start(pos)
            if pos < meta.storage_length and not meta.tier2_stale:
                stop = min(meta.storage_length, nxt, max(end, pos + self._read_block_bytes))
                block = await self._from_tier2(meta, pos, stop - pos)
                idx.add_block(pos, block)
                take = min(end, stop) - pos
                chunks.append(memoryview(block)[:take])
                pos += take
                continue
            for off, length, src in idx.merges:
                if off <= pos < off + length:
                    stop = min(end, nxt, off + length)
                    chunks.extend(await self.read(src, pos - off, stop - off))
                    pos = stop
                    break
            else:
                raise DataCorruptionError(meta.name, f"no source for offset {pos}")
        return chunks

    async def _from_tier2(self, meta: SegmentMeta, offset: int, length: int) -> bytes:
        try:
            return await asyncio.to_thread(self.storage.read, meta.name, offset, length)
        except DataMissingError as exc:
            raise DataCorruptionError(meta.name, f"Tier-2 data missing: {exc}") from exc
        except StorageError as exc:
            raise DataCorruptionError(meta.name, f"Tier-2 read failed: {exc}") from exc

    async def _from_tier1(self, idx: SegmentReadIndex, entry: CacheEntry) -> bytes | memoryview:
        op = await self._tier1_read(entry)
        data: bytes | memoryview | None = getattr(op, "data", None)
        if op.seq != entry.seq or data is None or len(data) != entry.end - entry.start:
            raise DataCorruptionError(idx.meta.name, f"Tier-1 entry for seq {entry.seq} mismatch")
        if entry.data is None and not entry.removed:
            entry.data = data
            if not entry.flushed:
                idx.cache.add(entry)
        return data
