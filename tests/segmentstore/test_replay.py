"""Recovery replays runs of appends: appends to a segment read back together from Tier-1
become one cache entry and one append for the storage writer. Whatever the mix (empty,
small, large, spanning frames, with attribute updates, between seals and truncations),
the recovered store reads the same bytes, then flushes them to Tier-2 and truncates
Tier-1 as if it had never restarted."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from tidegate.core.segmentstore.api import AttributeUpdate
from tidegate.core.segmentstore.apply import COALESCE_BYTES_MAX
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore

from tests.segmentstore.helpers import read_all

CFG = SegmentStoreConfig(
    container_count=1,
    frame_bytes_max=16 * 1024,
    tier1_file_bytes_max=64 * 1024,
    checkpoint_interval_bytes=128 * 1024,
    flush_bytes=1 << 30,
    flush_interval_ms=3_600_000,  # the writer flushes only when told: replay finds it all
    flush_trickle_bytes=0,  # (and sends nothing to Tier-2 before that)
)
NAMES = [f"seg-{k}" for k in range(4)]
SIZES = [0, 1, 100, 1000, 5000, COALESCE_BYTES_MAX, COALESCE_BYTES_MAX + 1, 40_000]


async def test_replayed_runs_read_flush_and_truncate_as_before(tmp_path: Path) -> None:
    rng = random.Random(7)
    s = StreamSegmentStore(tmp_path, CFG)
    await s.start()
    for n in NAMES:
        await s.create_segment(n)
    expect = {n: bytearray() for n in NAMES}
    appends = 0
    start1 = 0

    async def append(n: str, tag: int, with_attr: bool) -> None:
        data = bytes([tag % 256]) * rng.choice(SIZES)
        updates = [AttributeUpdate("last", tag)] if with_attr else []
        # Queued in call order (the store's ordering contract), so ``expect`` follows.
        pending = s.append(n, data, attribute_updates=updates)
        expect[n] += data
        await pending

    for round_ in range(12):
        await asyncio.gather(*(append(rng.choice(NAMES), round_ * 40 + i, i % 9 == 0) for i in range(40)))
        appends += 40
        if round_ == 5:
            start1 = len(expect["seg-1"]) // 2
            await s.truncate("seg-1", start1)
    await s.seal("seg-3")
    before = {n: await s.get_info(n) for n in NAMES}
    await s.close()

    s = StreamSegmentStore(tmp_path, CFG)
    await s.start()
    c = s.containers[0]
    entries = sum(len(idx.entries) for idx in c.read_index.segments.values())
    assert 0 < entries < appends  # runs were joined
    for idx in c.read_index.segments.values():
        for entry in idx.entries.values():
            assert type(entry.data) is bytes  # copied: no Tier-1 frame stays pinned
    for n in NAMES:
        info = await s.get_info(n)
        if n != "seg-1":  # (the truncation flushed seg-1 as far as it then was)
            assert info.storage_length == 0  # everything came back from Tier-1
        assert (info.length, info.start_offset, info.sealed, info.attributes) == (
            before[n].length, before[n].start_offset, before[n].sealed, before[n].attributes,
        )
        got = await read_all(s, n)
        skip = start1 if n == "seg-1" else 0
        assert got == bytes(expect[n][skip:])
    tier1 = tmp_path / "tier1" / "container-0"
    logs_before = sorted(p.name for p in tier1.glob("*.log"))
    assert len(logs_before) > 3

    await s.flush_to_storage()
    logs_after = sorted(p.name for p in tier1.glob("*.log"))
    assert len(logs_after) <= 2 and not set(logs_after) & set(logs_before[:-1]), (logs_before, logs_after)
    for n in NAMES:
        info = await s.get_info(n)
        assert info.storage_length == info.length == before[n].length
        assert await read_all(s, n) == bytes(expect[n][start1 if n == "seg-1" else 0 :])
    await s.append("seg-0", b"tail")
    expect["seg-0"] += b"tail"
    await s.close()

    s = StreamSegmentStore(tmp_path, CFG)
    await s.start()
    for n in NAMES:
        assert await read_all(s, n) == bytes(expect[n][start1 if n == "seg-1" else 0 :])
    await s.close()
