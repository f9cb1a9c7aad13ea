"""Reading a segment several times larger than the cache from Tier-2: the cache's
accounting matches what its entries really hold, stays under ``cache_bytes_max``, no
entry exceeds ``tier2_read_block_bytes``, and traced memory stays under the bound plus
a fixed overhead (DESIGN invariant 6)."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import tracemalloc
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.reading.cache import ENTRY_OVERHEAD_BYTES, Cache, CacheEntry
from tidegate.core.segmentstore.service import StreamSegmentStore

KiB = 1024
MiB = 1024 * KiB
CACHE_MAX = 1 * MiB
BLOCK = 64 * KiB
SEG_BYTES = 8 * MiB
PIECE = bytes(range(256)) * 128  # 32 KiB


def held(s: StreamSegmentStore) -> tuple[int, int, int]:
    """(bytes charged for entries holding data, payload bytes really referenced,
    largest entry) over every segment index of every container."""
    charged = payload = largest = 0
    seen: set[int] = set()
    for obj in gc.get_objects():
        if isinstance(obj, CacheEntry) and obj.data is not None and not obj.removed:
            charged += obj.end - obj.start + ENTRY_OVERHEAD_BYTES
            data = obj.data
            base = data.obj if isinstance(data, memoryview) else data
            if id(base) not in seen:
                seen.add(id(base))
                payload += memoryview(base).nbytes
            largest = max(largest, obj.end - obj.start)
    return charged, payload, largest


async def _measure(tmp_path: Path, read_bytes: int) -> dict[str, int]:
    """Write a segment, restart the store and read it all from Tier-2 three times: the
    peaks of what the cache charged and held and of traced memory."""
    cfg = SegmentStoreConfig(
        container_count=1,
        cache_bytes_max=CACHE_MAX,
        tier2_read_block_bytes=BLOCK,
        flush_bytes=256 * KiB,
        flush_interval_ms=10,
    )
    s = StreamSegmentStore(tmp_path, cfg)
    await s.start()
    await s.create_segment("s")
    for _ in range(SEG_BYTES // len(PIECE)):
        await s.append("s", PIECE)
    await s.flush_to_storage()
    await s.close()

    s = StreamSegmentStore(tmp_path, cfg)  # empty cache: every byte comes from Tier-2
    await s.start()
    info = await s.get_info("s")
    assert info.length == SEG_BYTES
    assert isinstance(s.cache, Cache)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        peak_used = peak_charged = peak_payload = largest = 0
        for _ in range(3):
            for pos in range(0, SEG_BYTES, read_bytes):
                r = await s.read("s", pos, read_bytes)
                got = sum(len(c) for c in r.chunks)
                assert got == read_bytes
                assert bytes(r.chunks[0][:4]) == PIECE[:4]
                del r
                charged, payload, big = held(s)
                peak_used = max(peak_used, s.cache.used_bytes)
                peak_charged = max(peak_charged, charged)
                peak_payload = max(peak_payload, payload)
                largest = max(largest, big)
        _, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    await s.close()
    return {"used": peak_used, "charged": peak_charged, "payload": peak_payload,
            "largest": largest, "traced": traced_peak - base}  # fmt: skip


def _measure_in_this_process(tmp_path: Path, read_bytes: int) -> dict[str, int]:
    return asyncio.run(_measure(tmp_path, read_bytes))


# Reads smaller and larger than the whole cache, both larger than a block.
@pytest.mark.parametrize("read_bytes", [512 * KiB, 2 * MiB])
def test_reading_far_more_than_the_cache_from_tier2(tmp_path: Path, read_bytes: int) -> None:
    # In a fresh interpreter: tracemalloc traces every thread of its process, and threads
    # other tests left in this one (a failed test's clients) would count.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        peak = pool.submit(_measure_in_this_process, tmp_path, read_bytes).result(timeout=240)
    assert peak["used"] <= CACHE_MAX
    assert peak["charged"] <= CACHE_MAX
    # What entries reference is what they are charged (no slice pins a larger buffer).
    assert peak["payload"] <= CACHE_MAX
    assert peak["largest"] <= BLOCK
    # Bound + one read's bytes in flight + fixed overhead (objects, index, frames).
    assert peak["traced"] < CACHE_MAX + read_bytes + 2 * MiB, peak


def test_a_small_slice_of_a_large_buffer_is_copied() -> None:
    big = bytes(1 * MiB)
    cache = Cache(4 * MiB)
    from tidegate.core.segmentstore.reading.index import SegmentReadIndex

    class _Meta:
        id = 1

    idx = SegmentReadIndex(_Meta(), cache, None)  # type: ignore[arg-type]
    small = CacheEntry(idx, 0, memoryview(big)[:1000])
    assert isinstance(small.data, bytes) and len(small.data) == 1000
    most = memoryview(big)[: 900 * KiB]
    kept = CacheEntry(idx, 0, most)
    assert kept.data is most  # mostly the whole buffer: not worth a copy
