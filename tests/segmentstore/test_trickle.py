"""Between flushes the storage writer trickles a segment's bytes into Tier-2 unsynced;
the flush syncs them, and only then may Tier-1 let them go."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore
from tidegate.tier2.api import WriteData
from tidegate.tier2.fileio import as_views
from tidegate.tier2.inmemory import InMemoryStorage

from tests.segmentstore.helpers import read_all

CFG = SegmentStoreConfig(
    container_count=1,
    tier1_file_bytes_max=64 * 1024,
    frame_bytes_max=16 * 1024,
    checkpoint_interval_bytes=32 * 1024,
    flush_bytes=1024 * 1024,
    flush_interval_ms=60_000,  # only the explicit flush syncs
    flush_trickle_bytes=4096,
    flush_trickle_interval_ms=0,
)


async def test_trickled_bytes_reach_tier2_and_tier1_keeps_them_until_the_flush(
    tmp_path: Path,
) -> None:
    s = StreamSegmentStore(tmp_path, CFG, clock=lambda: 0.0)
    await s.start()
    await s.create_segment("seg")
    expect = bytearray()
    for i in range(100):
        data = bytes([i]) * (3000 + i)
        await s.append("seg", data)
        expect += data
    writer = s.containers[0].writer
    for _ in range(200):
        if (await s.get_info("seg")).storage_length > len(expect) - 4096:
            break  # all that will trickle did: less than flush_trickle_bytes is left
        await asyncio.sleep(0.01)
    info = await s.get_info("seg")
    assert writer.tier2_trickles > 0 and writer.tier2_writes == 0
    assert len(expect) - 4096 < info.storage_length <= len(expect)
    tier2_file = tmp_path / "tier2"
    assert sum(p.stat().st_size for p in tier2_file.rglob("*.chunk")) == info.storage_length
    # Nothing is synced in Tier-2 yet: Tier-1 still holds every byte.
    tier1 = tmp_path / "tier1" / "container-0"
    before = sorted(p.name for p in tier1.glob("*.log"))
    assert before[0] == f"{1:020d}.log" and len(before) > 3  # the log's first file
    assert await read_all(s, "seg") == expect

    await s.flush_to_storage()  # writes the rest, syncs it all, truncates Tier-1
    assert writer.tier2_writes <= 1  # the rest if any, synced with what trickled
    after = sorted(p.name for p in tier1.glob("*.log"))
    assert not set(after) & set(before[:-1]), (before, after)
    assert (await s.get_info("seg")).storage_length == len(expect)
    await s.append("seg", b"tail")
    await s.close()

    s = StreamSegmentStore(tmp_path, CFG)
    await s.start()
    assert await read_all(s, "seg") == expect + b"tail"
    await s.close()


class _Recording(InMemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[int, int, bool]] = []

    def write(self, name: str, offset: int, data: WriteData, *, durable: bool = True) -> None:
        super().write(name, offset, data, durable=durable)
        self.writes.append((offset, sum(v.nbytes for v in as_views(data)), durable))


async def test_a_flush_of_bytes_all_trickled_already_still_syncs(tmp_path: Path) -> None:
    tier2 = _Recording()
    s = StreamSegmentStore(tmp_path, CFG, tier2=tier2)
    await s.start()
    await s.create_segment("seg")
    for i in range(10):
        await s.append("seg", bytes([i]) * 5000)  # each alone reaches flush_trickle_bytes
    for _ in range(200):
        if (await s.get_info("seg")).storage_length == 50_000:
            break
        await asyncio.sleep(0.01)
    assert tier2.writes and all(not durable for _, _, durable in tier2.writes)
    await s.flush_to_storage()
    assert tier2.writes[-1] == (50_000, 0, True)  # nothing left to write: a sync
    await s.close()
