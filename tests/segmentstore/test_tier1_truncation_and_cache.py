"""Tier-1 truncation after the storage writer catches up (observed on disk), and the
cache bound (memory does not grow with the data written)."""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.operations import Operation
from tidegate.core.segmentstore.service import StreamSegmentStore
from tidegate.core.segmentstore.tier1.api import LogAddress
from tidegate.tier2.api import WriteData
from tidegate.tier2.faults import FaultyStorage
from tidegate.tier2.inmemory import InMemoryStorage

CFG = SegmentStoreConfig(
    container_count=1,
    tier1_file_bytes_max=64 * 1024,
    frame_bytes_max=16 * 1024,
    checkpoint_interval_bytes=128 * 1024,
    flush_bytes=256 * 1024,
    flush_interval_ms=60_000,  # only explicit flushes: the test decides when
)


async def read_all(s: StreamSegmentStore, name: str) -> bytes:
    info = await s.get_info(name)
    r = await s.read(name, info.start_offset, info.length)
    return b"".join(bytes(c) for c in r.chunks)


async def test_tier1_files_deleted_once_in_tier2(tmp_path: Path) -> None:
    s = StreamSegmentStore(tmp_path, CFG, clock=lambda: 0.0)  # time never flushes
    await s.start()
    await s.create_segment("s")
    expect = b""
    for i in range(200):
        data = bytes([i]) * (1000 + i)
        await s.append("s", data)
        expect += data
    tier1 = tmp_path / "tier1" / "container-0"
    before = sorted(p.name for p in tier1.glob("*.log"))
    assert len(before) > 3
    assert await read_all(s, "s") == expect
    await s.flush_to_storage()
    after = sorted(p.name for p in tier1.glob("*.log"))
    assert len(after) <= 2 and not set(after) & set(before[:-1]), (before, after)
    assert (await s.get_info("s")).storage_length == len(expect)
    assert await read_all(s, "s") == expect
    await s.close()
    s = StreamSegmentStore(tmp_path, CFG)
    await s.start()
    assert await read_all(s, "s") == expect  # from Tier-2 after recovery
    await s.append("s", b"tail")
    await s.close()
    s = StreamSegmentStore(tmp_path, CFG)
    await s.start()
    assert await read_all(s, "s") == expect + b"tail"
    await s.close()


#: Where the store's own allocations are made (the appended bytes in this file). Counting
#: every allocation of the process failed once in the full suite (4.4 MB; 0.6-1.1 MB
#: alone and in other full runs): whatever earlier tests leave running (client threads
#: that keep reconnecting to stopped servers) is counted too.
_STORE_FILES = ("*/core/*", "*/tier2/*", "*/asyncio/*", __file__)


def _store_memory(snapshot: tracemalloc.Snapshot) -> int:
    kept = snapshot.filter_traces([tracemalloc.Filter(True, f) for f in _STORE_FILES])
    return sum(stat.size for stat in kept.statistics("filename"))


async def test_cache_stays_bounded_and_reads_fall_back(tmp_path: Path) -> None:
    cache_max = 256 * 1024
    cfg = SegmentStoreConfig(
        container_count=2,
        cache_bytes_max=cache_max,
        flush_bytes=128 * 1024,
        flush_interval_ms=10,
        writer_lag_bytes_max=512 * 1024,
    )
    s = StreamSegmentStore(tmp_path, cfg)
    await s.start()
    names = [f"s{i}" for i in range(4)]
    for n in names:
        await s.create_segment(n)
    chunk = 4096
    N = 1200
    gc.collect()
    tracemalloc.start()
    try:
        base = _store_memory(tracemalloc.take_snapshot())
        peak_used = 0
        for b in range(0, N, 50):  # ~5 MB, 20x the cache
            await asyncio.gather(
                *(s.append(names[i % 4], bytes([i % 256]) * chunk) for i in range(b, b + 50))
            )
            peak_used = max(peak_used, s.cache.used_bytes)
        gc.collect()
        grown = _store_memory(tracemalloc.take_snapshot()) - base
    finally:
        tracemalloc.stop()
    assert peak_used <= cache_max
    assert max(c.writer.lag_bytes for c in s.containers.values()) < 2 * 1024 * 1024
    assert grown < 3 * 1024 * 1024, grown  # well below the 5 MB written
    # Everything is still readable: evicted data comes from Tier-1 or Tier-2.
    for k, n in enumerate(names):
        data = await read_all(s, n)
        assert data == b"".join(bytes([i % 256]) * chunk for i in range(k, N, 4))
    assert s.cache.used_bytes <= cache_max
    await s.close()


async def test_evicted_unflushed_data_read_back_from_tier1(tmp_path: Path) -> None:
    # Tier-2 refuses every call until the end: data can only come from cache or Tier-1.
    tier2 = FaultyStorage(InMemoryStorage(), seed=1, error_rate=1.0)
    # Acknowledgements never wait for the cache here (``writer_cache_share_max``): the
    # appends overflow it and what it evicts is read back from Tier-1.
    cfg = SegmentStoreConfig(
        container_count=1, cache_bytes_max=32 * 1024, writer_retry_delay_ms=1, writer_cache_share_max=2.0
    )
    s = StreamSegmentStore(tmp_path, cfg, tier2=tier2)
    await s.start()
    await s.create_segment("s")
    expect = b""
    for i in range(100):
        data = bytes([i]) * 3000
        await s.append("s", data)
        expect += data
    assert (await s.get_info("s")).storage_length == 0  # nothing in Tier-2
    assert s.cache.used_bytes <= 32 * 1024
    assert await read_all(s, "s") == expect  # via Tier-1
    tier2._error_rate = 0.0  # Tier-2 is back
    await s.flush_to_storage()  # the writer, too, reads evicted data back from Tier-1
    assert (await s.get_info("s")).storage_length == len(expect)
    assert await read_all(s, "s") == expect
    await s.close()


async def test_evicted_ranges_leave_memory_for_the_rocksdb_tier1_index(tmp_path: Path) -> None:
    """While Tier-2 is down, evicted data not yet in Tier-2 is only recorded (segment
    range -> Tier-1 location) in the container's RocksDB ``Tier1Index``: the in-memory
    read index stays at the cache bound. Reads and the writer seek back into Tier-1 for
    it, across a restart too (recovery rebuilds the index of its own epoch)."""
    tier2 = FaultyStorage(InMemoryStorage(), seed=2, error_rate=1.0)
    cfg = SegmentStoreConfig(
        container_count=1, cache_bytes_max=64 * 1024, writer_retry_delay_ms=1, frame_bytes_max=8192,
        writer_cache_share_max=2.0,  # acknowledgements never wait for the cache
    )
    names = [f"seg-{k}" for k in range(5)]
    expect = {n: bytearray() for n in names}

    async def fill(s: StreamSegmentStore, rounds: int, tag: int) -> None:
        for i in range(rounds):
            await asyncio.gather(*(s.append(n, bytes([tag + i % 50, k]) * 512) for k, n in enumerate(names)))
            for k, n in enumerate(names):
                expect[n] += bytes([tag + i % 50, k]) * 512

    s = StreamSegmentStore(tmp_path, cfg, tier2=tier2)
    await s.start()
    for n in names:
        await s.create_segment(n)
    await fill(s, 300, 0)  # 1.5 MB, 24x the cache
    c = s.containers[0]
    tier1 = c.read_index.tier1
    assert tier1 is not None and tier1.count > 100
    in_memory = sum(len(idx.entries) + len(idx.unflushed) for idx in c.read_index.segments.values())
    assert in_memory < 2 * 64 * 1024 // 1024, in_memory  # bounded by the cache, not the lag
    epoch_dir = tier1.path
    for n in names:
        assert await read_all(s, n) == expect[n]
        r = await s.read(n, 5 * 1024 + 3, 10_000)  # mid-range, across several ranges
        assert b"".join(bytes(x) for x in r.chunks) == expect[n][5 * 1024 + 3 : 5 * 1024 + 3 + 10_000]
    await s.close()
    assert not epoch_dir.exists()  # the index is rebuilt by the next owner, not kept

    tier2.exempt.add("get_info")  # recovery reconciles lengths; writes still fail
    s = StreamSegmentStore(tmp_path, cfg, tier2=tier2)
    await s.start()  # replay evicts into a fresh index
    c = s.containers[0]
    assert c.read_index.tier1 is not None and c.read_index.tier1.count > 0  # replay coalesces runs
    assert c.read_index.tier1.path != epoch_dir
    await fill(s, 20, 100)
    for n in names:
        assert await read_all(s, n) == expect[n]
    tier2._error_rate = 0.0
    await s.flush_to_storage()  # the writer reads the evicted ranges back from Tier-1
    for n in names:
        assert (await s.get_info(n)).storage_length == len(expect[n])
        assert await read_all(s, n) == expect[n]
    assert c.read_index.tier1.count == 0  # all in Tier-2 now: every range forgotten
    await s.delete_segment(names[0])
    await s.close()


async def test_tier1_read_back_outrun_by_truncation_falls_back_to_tier2(tmp_path: Path) -> None:
    """A read of evicted data looks its range up in the Tier1Index, and before it reads
    Tier-1 the storage writer moves the range to Tier-2 and Tier-1 is truncated past
    it: its files retired as spares and reused by the next rolls. The read must return
    the bytes from Tier-2, not fail on a missing or rewritten Tier-1 file."""
    tier2 = FaultyStorage(InMemoryStorage(), seed=3, error_rate=1.0)
    cfg = SegmentStoreConfig(
        container_count=1,
        cache_bytes_max=32 * 1024,
        tier1_file_bytes_max=64 * 1024,
        frame_bytes_max=8192,
        writer_retry_delay_ms=1,
        tier1_spare_files=4,
        writer_cache_share_max=2.0,  # acknowledgements never wait for the cache
    )
    s = StreamSegmentStore(tmp_path, cfg, tier2=tier2)
    await s.start()
    await s.create_segment("s")
    await s.create_segment("other")
    expect = b""
    for i in range(100):
        data = bytes([i]) * 3000
        await s.append("s", data)
        expect += data
    index = s.containers[0].read_index
    real_read = index._tier1_read
    raced: list[LogAddress] = []

    async def outrun(address: LogAddress, frame_pos: int) -> AsyncGenerator[Operation, None]:
        if not raced:
            raced.append(address)
            tier2._error_rate = 0.0
            await s.flush_to_storage()  # Tier-2 takes it all; Tier-1 truncated
            for k in range(40):  # rolls reuse the retired files
                await s.append("other", bytes([k]) * 3000)
        async for op in real_read(address, frame_pos):
            yield op

    index._tier1_read = outrun
    assert await read_all(s, "s") == expect
    assert raced, "the read went to Tier-1"
    assert (await s.get_info("s")).storage_length == len(expect)
    await s.close()


class _SlowStorage(InMemoryStorage):
    """Tier-2 whose writes take 20 ms each: the writers fall behind the appends."""

    def write(self, name: str, offset: int, data: WriteData, *, durable: bool = True) -> None:
        time.sleep(0.02)
        super().write(name, offset, data, durable=durable)


@pytest.mark.parametrize("share", [0.75, 2.0])
async def test_acknowledgements_wait_for_the_writers_instead_of_evicting_unflushed_data(
    tmp_path: Path, share: float
) -> None:
    """Behind a slow Tier-2, the shared cache would fill with data not yet in Tier-2 and
    evict it, for the writers to read back from Tier-1. With ``writer_cache_share_max``
    below 1, acknowledgements wait for the writers instead and nothing is evicted (each
    container's own lag bound is far above the cache here); at 2.0 (never wait) the same
    load evicts."""
    cache_max = 256 * 1024
    cfg = SegmentStoreConfig(
        container_count=2,
        cache_bytes_max=cache_max,
        flush_bytes=64 * 1024,
        flush_interval_ms=10,
        writer_lag_bytes_max=64 * 1024 * 1024,
        writer_cache_share_max=share,
    )
    s = StreamSegmentStore(tmp_path, cfg, tier2=_SlowStorage())
    await s.start()
    names = [f"s{i}" for i in range(4)]
    for n in names:
        await s.create_segment(n)
    chunk = 4096
    n_appends = 800  # ~3.3 MB, 13x the cache

    async def writer(w: int) -> None:
        for i in range(w, n_appends, 8):
            await s.append(names[i % 4], bytes([i % 256]) * chunk)

    await asyncio.gather(*(writer(w) for w in range(8)))
    if share < 1:
        assert s.stats()["cache_spilled_bytes"] == 0
    else:
        assert s.stats()["cache_spilled_bytes"] > 0
    for k, n in enumerate(names):
        assert await read_all(s, n) == b"".join(bytes([i % 256]) * chunk for i in range(k, n_appends, 4))
    await s.close()


async def test_tier2_in_a_directory_of_its_own(tmp_path: Path) -> None:
    """``tier2_dir`` puts the segment files on another mount (another device, in a real
    deployment); the store's data directory keeps Tier-1 and the indexes."""
    data, elsewhere = tmp_path / "data", tmp_path / "tier2-mount"
    cfg = SegmentStoreConfig(container_count=1, tier2_dir=str(elsewhere))
    s = StreamSegmentStore(data, cfg)
    await s.start()
    await s.create_segment("s")
    for i in range(20):
        await s.append("s", bytes([i]) * 5000)
    await s.flush_to_storage()
    assert (await s.get_info("s")).storage_length == 100_000
    await s.close()
    assert list(elsewhere.rglob("*.chunk")) and not (data / "tier2").exists()
    s = StreamSegmentStore(data, cfg)
    await s.start()
    assert await read_all(s, "s") == b"".join(bytes([i]) * 5000 for i in range(20))
    assert s.stats()["cache_tier2_block_bytes"] > 0  # read back from the other mount
    await s.close()
