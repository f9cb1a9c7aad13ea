"""Cached data costs the garbage collector nothing it can avoid.

Every cache entry lives until it is evicted, so whatever it holds is scanned by each
full collection. Under steady small requests the entries' views (a memoryview and its
managed buffer each) and Tier-1 addresses made tens of thousands of tracked objects,
and full collections held the event loop (bench/RESULTS.md). Small appends are cached
as ``bytes`` (untracked) and an entry keeps its address as two ints."""

from __future__ import annotations

import gc
from pathlib import Path

from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore


async def test_small_appends_are_cached_as_untracked_bytes(tmp_path: Path) -> None:
    s = StreamSegmentStore(tmp_path, SegmentStoreConfig(container_count=1))
    await s.start()
    await s.create_segment("s")
    expect = b""
    for i in range(20):  # one at a time: each commit holds a single append
        buf = bytes([i]) * 1000
        await s.append("s", memoryview(buf))  # a read-only view: kept by the store
        expect += buf
    idx = next(iter(s.containers.values())).read_index
    entries = [e for seg in idx.segments.values() for e in seg.entries.values()]
    assert len(entries) == 20
    for e in entries:
        assert e.data is not None and not gc.is_tracked(e.data), type(e.data)
        assert e.address is not None and e.file_id >= 0
    r = await s.read("s", 0, len(expect))
    assert b"".join(bytes(c) for c in r.chunks) == expect
    await s.close()
