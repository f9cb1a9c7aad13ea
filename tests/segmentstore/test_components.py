"""Unit tests of the segment store's parts: operation codec, data frames, durable log,
metadata checkpoints, table index, cache, traffic meter."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from tidegate.core.segmentstore.api import NOT_EXISTS, StoreShutdownError
from tidegate.core.segmentstore.durablelog.frames import FRAME_HEAD, read_operations
from tidegate.core.segmentstore.durablelog.log import DurableLog
from tidegate.core.segmentstore.metadata import ContainerMetadata
from tidegate.core.segmentstore.operations import (
    AppendOp,
    AttrsOp,
    CheckpointOp,
    CreateOp,
    DeleteOp,
    MergeOp,
    Operation,
    SealOp,
    TableCompactOp,
    TableWriteOp,
    TruncateOp,
    parse,
    serialize,
)
from tidegate.core.segmentstore.reading.cache import ENTRY_OVERHEAD_BYTES, Cache
from tidegate.core.segmentstore.reading.index import SegmentReadIndex
from tidegate.core.segmentstore.tables import PUT, REMOVE, TableIndex, encode
from tidegate.core.segmentstore.tier1.faults import FaultyDurableDataLog
from tidegate.core.segmentstore.tier1.inmemory import InMemoryDurableDataLog, InMemoryLogBacking
from tidegate.core.segmentstore.traffic import Traffic


def _roundtrip(op: Operation) -> Operation:
    parts, size = serialize(op)
    raw = b"".join(parts)
    assert len(raw) == size
    return parse(memoryview(raw))


def test_operation_codec_roundtrip() -> None:
    ops: list[Operation] = [
        CreateOp(3, "scope/stream/0.#epoch.1", True, (("a", 1), ("b", -5))),
        AppendOp(3, "", 17, b"payload", (("pid", 99),)),
        AppendOp(4, "", 0, memoryview(b"x" * 1000)),
        AttrsOp(3, "", (("k", 2**62),)),
        SealOp(3, ""),
        TruncateOp(3, "", 12),
        MergeOp(3, "", 9, 100, 50),
        DeleteOp(9, ""),
        TableWriteOp(5, "", 64, encode(PUT, b"k", b"v", 64)),
        TableCompactOp(5, "", 128, 100, encode(PUT, b"k", b"v", 64)),
        CheckpointOp(b"\x01\x02"),
    ]
    for i, op in enumerate(ops):
        op.seq = 1000 + i
        back = _roundtrip(op)
        assert type(back) is type(op) and back.seq == op.seq
        for attr in ("segment_id", "offset", "length", "attributes", "source_id", "new_start", "is_table"):
            if hasattr(op, attr):
                assert getattr(back, attr) == getattr(op, attr), attr
        if isinstance(op, (AppendOp, TableWriteOp, CheckpointOp)):
            assert op.data is not None and back.data is not None  # type: ignore[attr-defined]
            assert bytes(back.data) == bytes(op.data)  # type: ignore[attr-defined]
    assert isinstance(_roundtrip(ops[0]), CreateOp) and _roundtrip(ops[0]).name == ops[0].name


async def test_frames_span_and_session_restart() -> None:
    backing = InMemoryLogBacking()
    log = InMemoryDurableDataLog(backing)
    await log.open()
    committed: list[Operation] = []
    failures: list[BaseException] = []
    dl = DurableLog(
        log, frame_bytes_max=256, frames_in_flight_max=4, on_commit=committed.extend, on_failure=failures.append
    )
    dl.start()
    ops = []
    for i in range(20):
        op = AppendOp(1, "s", i * 1000, bytes([i]) * (1 + 97 * i))  # many span frames
        op.seq = i + 1
        op.future = asyncio.get_running_loop().create_future()
        dl.add(op)
        ops.append(op)
    await asyncio.gather(*(op.future for op in ops if op.future is not None))
    assert [op.seq for op in committed] == list(range(1, 21))
    assert all(len(data) <= 256 for _, data in backing.entries)
    assert len(backing.entries) > 20
    # Every op's recorded start address decodes back to that op.
    for op in ops:
        assert op.address is not None
        async for back in read_operations(log, op.address, op.frame_pos):
            assert back.seq == op.seq
            break
    await dl.drain()
    await dl.stop()
    # A torn operation at the end of a session is dropped; the next session's frames
    # (SESSION_START) decode from their own start.
    half = backing.entries[-1]
    backing.entries[-1] = (half[0], half[1][: FRAME_HEAD.size + 3])
    await log.close()
    log2 = InMemoryDurableDataLog(backing)
    await log2.open()
    dl2 = DurableLog(log2, frame_bytes_max=256, frames_in_flight_max=4, on_commit=committed.extend, on_failure=failures.append)
    dl2.start()
    op = AppendOp(2, "t", 0, b"after")
    op.seq = 99
    op.future = asyncio.get_running_loop().create_future()
    dl2.add(op)
    await op.future
    seqs = [o.seq for o in [o async for o in read_operations(log2)]]
    assert seqs[-1] == 99 and 20 not in seqs and seqs[:19] == list(range(1, 20))
    await dl2.stop()
    assert not failures


async def test_durable_log_failure_fails_later_ops() -> None:
    log = FaultyDurableDataLog(InMemoryDurableDataLog(), fail_after_appends=2)
    await log.open()
    failures: list[BaseException] = []
    dl = DurableLog(log, frame_bytes_max=128, frames_in_flight_max=8, on_commit=lambda ops: None, on_failure=failures.append)
    dl.start()
    futs = []
    for i in range(6):
        op = AppendOp(1, "s", i * 100, b"z" * 100)
        op.seq = i + 1
        op.future = asyncio.get_running_loop().create_future()
        futs.append(op.future)
        dl.add(op)
    res = await asyncio.gather(*futs, return_exceptions=True)
    assert any(r is None for r in res)
    first_bad = next(i for i, r in enumerate(res) if r is not None)
    assert all(isinstance(r, StoreShutdownError) for r in res[first_bad:])
    assert failures
    with pytest.raises(StoreShutdownError):
        dl.add(SealOp(1, "s"))
    await dl.stop()


def test_metadata_checkpoint_roundtrip() -> None:
    md = ContainerMetadata()
    a = md.new_segment("a", False, {"x": 1})
    a.p_length, a.p_start, a.p_sealed = 100, 10, True
    a.p_attributes["y"] = 2
    t = md.new_segment("t", True, {})
    t.p_length = 5
    gone = md.new_segment("gone", False, {})
    gone.p_deleted = True
    md.seq = 77
    snap = md.snapshot()
    md2 = ContainerMetadata()
    md2.restore(snap)
    assert md2.seq == 77 and md2.next_id == md.next_id
    assert set(md2.by_name) == {"a", "t"}
    r = md2.by_name["a"]
    assert (r.id, r.length, r.start_offset, r.sealed, r.attributes) == (a.id, 100, 10, True, {"x": 1, "y": 2})
    assert r.created and md2.by_name["t"].is_table


def test_table_index_versions_and_compaction_data() -> None:
    t = TableIndex()
    t.queue(b"a", 0)
    t.queue(b"b", 20)
    assert t.version(b"a") == 0 and t.version(b"c") == NOT_EXISTS
    data = encode(PUT, b"a", b"1", 0) + encode(PUT, b"b", b"2", 20)
    t.apply(data, 0, queued=True)
    assert not t.pending and t.get(b"a") is not None
    t.queue(b"a", NOT_EXISTS)
    assert t.version(b"a") == NOT_EXISTS and not t.pending_empty()
    t.apply(encode(REMOVE, b"a", b"", 0), len(data), queued=True)
    assert t.get(b"a") is None
    assert [e.key for e in t.items(b"")] == [b"b"]
    compact = t.compaction_data(below=1000)
    t.apply(compact, 5000, queued=True, compact=True)
    assert t.entries[b"b"][1] == 5000 and t.entries[b"b"][0].version == 20


def test_cache_evicts_flushed_first_then_unflushed_to_the_tier1_index(tmp_path: Path) -> None:
    from tidegate.core.segmentstore.metadata import SegmentMeta
    from tidegate.core.segmentstore.reading.tier1index import Tier1Index
    from tidegate.core.segmentstore.tier1.api import LogAddress

    cache = Cache(3 * (100 + ENTRY_OVERHEAD_BYTES))
    meta = SegmentMeta(1, "s", False, {})
    tier1 = Tier1Index(tmp_path / "t1", epoch=1)
    idx = SegmentReadIndex(meta, cache, tier1)
    ops = []
    for i in range(3):
        op = AppendOp(1, "s", i * 100, b"x" * 100)
        op.seq, op.address = i + 1, LogAddress(1, i)
        ops.append(op)
        idx.add_append(i * 100, b"x" * 100, op)
    meta.storage_length = 100
    idx.flushed_to(100)  # entry 0 is in Tier-2 now
    op = AppendOp(1, "s", 300, b"y" * 100)
    op.seq, op.address = 4, LogAddress(1, 3)
    idx.add_append(300, b"y" * 100, op)  # over budget: the flushed entry goes first
    assert idx.find(0) is None and idx.find(150) is not None
    assert cache.used_bytes <= cache.bytes_max
    op = AppendOp(1, "s", 400, b"z" * 100)
    op.seq, op.address = 5, LogAddress(1, 4)
    idx.add_append(400, b"z" * 100, op)  # now an unflushed one must go, to the Tier-1 index
    assert idx.find(100) is None and idx.spilled == 1 and tier1.count == 1
    r = tier1.find(1, 150)
    assert r is not None and (r.start, r.end, r.seq, r.address) == (100, 200, 2, LogAddress(1, 1))
    assert tier1.find(1, 200) is None and tier1.find(2, 150) is None
    assert cache.used_bytes <= cache.bytes_max
    meta.storage_length = 200
    idx.flushed_to(200)  # in Tier-2 now: the range is forgotten
    assert idx.spilled == 0 and tier1.count == 0 and tier1.find(1, 150) is None
    tier1.close()
    assert not (tmp_path / "t1" / "1").exists()


def test_blocks_read_from_tier2_do_not_push_out_recent_data(tmp_path: Path) -> None:
    """A reader catching up through Tier-2 keeps its blocks within their share of a full
    cache: past it, its own older blocks go first, not the recent appends (in Tier-2
    already) that tail readers are served from."""
    from tidegate.core.segmentstore.metadata import SegmentMeta
    from tidegate.core.segmentstore.reading.tier1index import Tier1Index
    from tidegate.core.segmentstore.tier1.api import LogAddress

    unit = 100 + ENTRY_OVERHEAD_BYTES
    cache = Cache(10 * unit, blocks_share_max=0.2)  # room for 10 entries, 2 of them blocks
    meta = SegmentMeta(1, "s", False, {})
    tier1 = Tier1Index(tmp_path / "t1", epoch=1)
    idx = SegmentReadIndex(meta, cache, tier1)
    for i in range(10, 20):  # the recent data: offsets 1000-2000
        op = AppendOp(1, "s", i * 100, b"r" * 100)
        op.seq, op.address = i, LogAddress(1, i)
        idx.add_append(i * 100, b"r" * 100, op)
    meta.storage_length = 2000
    idx.flushed_to(2000)
    for i in range(10):  # a catch-up reader goes through offsets 0-1000
        assert idx.add_block(i * 100, b"o" * 100) is not None
        assert cache.used_bytes <= cache.bytes_max
    assert cache.blocks_bytes == 2 * unit
    assert [idx.find(i * 100) is not None for i in range(10)] == [False] * 8 + [True] * 2
    recent = [idx.find(i * 100) is not None for i in range(10, 20)]
    assert recent == [False] * 2 + [True] * 8  # the blocks' share came from the oldest
    op = AppendOp(1, "s", 2000, b"n" * 100)
    op.seq, op.address = 20, LogAddress(1, 20)
    idx.add_append(2000, b"n" * 100, op)  # blocks within their share: the oldest recent goes
    assert idx.find(800) is not None and idx.find(900) is not None and idx.find(1200) is None
    cache.touch(idx.entries[800])  # blocks keep LRU order among themselves
    assert idx.add_block(1000, b"o" * 100) is not None  # over their share: the LRU block goes
    assert idx.find(900) is None and idx.find(800) is not None and idx.find(1300) is not None
    cache.discard(idx.entries[800])
    idx.drop(idx.entries[800])
    assert cache.blocks_bytes == unit and cache.used_bytes == 9 * unit
    tier1.close()


def test_traffic_converges_to_rate() -> None:
    now = [0.0]
    t = Traffic(lambda: now[0], window_ms=1000)
    for _ in range(10_000):  # 100 events/s of 1000 bytes for 100 s
        now[0] += 0.01
        t.record("s", 1000, 1)
    b, e = t.rates("s")
    assert math.isclose(b, 100_000, rel_tol=0.02) and math.isclose(e, 100, rel_tol=0.02)
    now[0] += 20
    assert t.rates("s")[0] < 1 and t.rates("unknown") == (0.0, 0.0)


async def test_store_traffic(tmp_path: object) -> None:
    from pathlib import Path

    from tests.segmentstore.helpers import Backings

    now = [0.0]
    b = Backings()
    from tidegate.core.segmentstore.service import StreamSegmentStore

    from tests.segmentstore.helpers import SMALL

    s = StreamSegmentStore(Path(str(tmp_path)), SMALL, clock=lambda: now[0], tier1_factory=b.log, tier2=b.tier2)
    await s.start()
    await s.create_segment("s")
    for _ in range(50):
        now[0] += 0.1
        await s.append("s", b"x" * 200, event_count=4)
    tr = s.traffic("s")
    assert tr.bytes_per_second > 0 and tr.events_per_second > 0
    assert math.isclose(tr.bytes_per_second / tr.events_per_second, 50, rel_tol=0.01)
    assert s.traffic("nope").bytes_per_second == 0
    await s.close()


def test_tier1_index_after_close(tmp_path: Path) -> None:
    """A read that outlives its container's stop gets a typed error; writes are dropped."""
    from tidegate.core.segmentstore.reading.tier1index import Tier1Index, Tier1Range
    from tidegate.core.segmentstore.tier1.api import LogAddress

    idx = Tier1Index(tmp_path / "t1", epoch=3)
    idx.put(7, Tier1Range(0, 10, 1, 1, LogAddress(1, 16), 0))
    assert idx.find(7, 5) is not None and [r.start for r in idx.ranges(7, 0, 100)] == [0]
    idx.close()
    with pytest.raises(StoreShutdownError):
        idx.find(7, 5)
    idx.put(7, Tier1Range(10, 20, 2, 2, LogAddress(1, 40), 0))
    assert idx.drop_flushed(7, 100) == 0
    again = Tier1Index(tmp_path / "t1", epoch=4)  # a later owner: earlier epochs are gone
    assert again.find(7, 5) is None and [p.name for p in (tmp_path / "t1").iterdir()] == ["4"]
    again.close()


async def test_durable_log_joins_small_frames_and_passes_large_ones_as_parts() -> None:
    """Frames of small operations reach Tier-1 as one buffer; a frame holding a large
    append as its parts, the append's own buffer among them (not copied)."""
    from tidegate.core.segmentstore.callbacks import DoneCallback
    from tidegate.core.segmentstore.durablelog.log import LARGE_OP_BYTES
    from tidegate.core.segmentstore.tier1.api import Entry, LogAddress

    class Recording(InMemoryDurableDataLog):
        def __init__(self) -> None:
            super().__init__(InMemoryLogBacking())
            self.entries: list[Entry] = []

        def append_future(
            self, entry: Entry, on_done: DoneCallback | None = None
        ) -> asyncio.Future[LogAddress]:
            self.entries.append(entry)
            return super().append_future(entry, on_done)

    log = Recording()
    await log.open()
    dl = DurableLog(log, frame_bytes_max=1 << 20, frames_in_flight_max=4,
                    on_commit=lambda ops: None, on_failure=lambda exc: None)
    dl.start()
    big = bytes(LARGE_OP_BYTES)
    for i, data in enumerate([b"a" * 100, b"b" * 200, big]):
        op = AppendOp(1, "s", 0, data)
        op.seq = i + 1
        dl.add(op)
        if i == 1:
            await dl.drain()  # the small ones in a frame of their own
    await dl.drain()
    small, large = log.entries
    assert isinstance(small, list) and len(small) == 1 and isinstance(small[0], bytes)
    assert isinstance(large, list) and any(part is big for part in large)
    await dl.stop()
    await log.close()
