"""Inactive segments (the seed's Active Segment Metadata): idle segments, and the least
recently used past ``active_segments_max``, leave memory for the container's RocksDB
store once all of them is in Tier-2; the next call naming one brings it back with the
same id and state; recovery finds them whether or not they came back before a restart;
a deleted segment's record goes."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from pathlib import Path

import pytest
from tidegate.core.segmentstore.api import (
    AttributeUpdate,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
)
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.container import SegmentContainer
from tidegate.core.segmentstore.metadata import SegmentMeta
from tidegate.core.segmentstore.service import StreamSegmentStore
from tidegate.core.segmentstore.writer import eviction
from tidegate.core.segmentstore.writer.writer import StorageWriter

CFG = SegmentStoreConfig(
    container_count=1,
    flush_interval_ms=20,
    segment_idle_ms=60_000,
    segment_evict_interval_ms=10,
)


class Clock:
    """The wall clock idleness is judged by, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def container(s: StreamSegmentStore) -> SegmentContainer:
    return s.containers[0]


async def started(
    tmp: Path, wall: Clock, cfg: SegmentStoreConfig = CFG
) -> tuple[StreamSegmentStore, SegmentContainer]:
    s = StreamSegmentStore(tmp, cfg, wall_clock=wall)
    await s.start()
    return s, container(s)


async def read_all(s: StreamSegmentStore, name: str) -> bytes:
    info = await s.get_info(name)
    r = await s.read(name, info.start_offset, info.length)
    return b"".join(bytes(c) for c in r.chunks)


async def until(cond: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def fill(s: StreamSegmentStore) -> dict[str, bytes]:
    """Five segments in different states: plain, sealed, truncated, with attributes,
    empty."""
    expect = {}
    for k in range(5):
        name = f"seg-{k}"
        await s.create_segment(name, {"k": k})
        data = bytes([k]) * (1000 * k + 10)
        if k != 4:
            await s.append(name, data)
            expect[name] = data
        else:
            expect[name] = b""
    await s.seal("seg-1")
    await s.truncate("seg-2", 500)
    await s.update_attributes("seg-3", [AttributeUpdate("x", 7)])
    return expect


async def test_idle_segments_leave_memory_and_come_back(tmp_path: Path) -> None:
    wall = Clock()
    s, c = await started(tmp_path, wall)
    expect = await fill(s)
    await s.create_table("t")  # tables always stay
    await s.flush_to_storage()
    before = {n: await s.get_info(n) for n in expect}
    ids = {n: c.md.by_name[n].id for n in expect}
    await asyncio.sleep(0.1)
    assert not c.writer.evicted  # not idle yet
    wall.now += 61  # idle now
    await until(lambda: c.writer.evicted == 5)
    assert set(c.md.by_name) == {"t"}
    assert c.inactive is not None and sorted(c.inactive.names()) == sorted(expect)
    assert not any(idx.meta.name in expect for idx in c.read_index.segments.values())

    # get_info answers from the record and leaves them inactive (polled by retention).
    for n in expect:
        assert await s.get_info(n) == before[n]
    assert c.activations == 0 and set(c.md.by_name) == {"t"}
    # Every other call naming one brings it back, same id, same state.
    for n in expect:
        await s.read(n, before[n].start_offset, 1)
        assert c.md.by_name[n].id == ids[n]
        assert await s.get_info(n) == before[n]
    assert c.activations == 5
    assert await read_all(s, "seg-0") == expect["seg-0"]
    assert await read_all(s, "seg-2") == expect["seg-2"][500:]
    with pytest.raises(SegmentTruncatedError):
        await s.read("seg-2", 10, 10)
    with pytest.raises(SegmentSealedError):
        await s.append("seg-1", b"x")
    assert (await s.get_info("seg-3")).attributes == {"k": 3, "x": 7}
    with pytest.raises(SegmentExistsError):
        await s.create_segment("seg-4")

    # Gone again, then an append brings one back and goes on at its end.
    wall.now += 61
    await until(lambda: c.writer.evicted == 10)
    assert await s.append("seg-0", b"more") == len(expect["seg-0"])
    assert await read_all(s, "seg-0") == expect["seg-0"] + b"more"
    await s.close()


async def test_recovery_finds_inactive_and_reactivated_segments(tmp_path: Path) -> None:
    """Tier-1 truncated at a checkpoint that omits the inactive segments: after a
    restart they are found in the store; one brought back by an append after that
    checkpoint is installed by the MAP operation replay reads first."""
    wall = Clock()
    s, c = await started(tmp_path, wall)
    expect = await fill(s)
    wall.now += 61
    await c.writer.evict_now()
    assert c.writer.evicted == 5
    await s.flush_to_storage()  # checkpoint without them; Tier-1 truncated there
    await s.append("seg-0", b"tail")  # MAP seg-0, then the append
    expect["seg-0"] += b"tail"
    await s.close()

    s, c = await started(tmp_path, wall)
    assert "seg-0" in c.md.by_name and c.activations == 0  # replayed from its MAP
    assert "seg-3" not in c.md.by_name  # still inactive
    for n, data in expect.items():
        got = await read_all(s, n)
        assert got == (data[500:] if n == "seg-2" else data), n
        assert (await s.get_info(n)).length == len(data)
    assert (await s.get_info("seg-3")).attributes == {"k": 3, "x": 7}
    assert (await s.get_info("seg-1")).sealed
    await s.close()


async def test_deleted_segment_record_goes_and_name_is_free(tmp_path: Path) -> None:
    wall = Clock()
    s, c = await started(tmp_path, wall)
    await fill(s)
    wall.now += 61
    await c.writer.evict_now()
    assert c.inactive is not None and "seg-0" in c.inactive.names()
    await s.delete_segment("seg-0")  # brought back, then deleted
    await s.flush_to_storage()
    assert "seg-0" not in c.inactive.names()
    await s.close()

    s = StreamSegmentStore(tmp_path, CFG, wall_clock=wall)
    await s.start()
    with pytest.raises(SegmentNotFoundError):
        await s.get_info("seg-0")
    await s.create_segment("seg-0")
    assert await read_all(s, "seg-0") == b""
    await s.append("seg-0", b"new")
    assert await read_all(s, "seg-0") == b"new"
    await s.close()


async def test_least_recently_used_leave_past_the_bound(tmp_path: Path) -> None:
    wall = Clock()
    cfg = SegmentStoreConfig(
        container_count=1,
        flush_interval_ms=20,
        segment_idle_ms=0,  # idleness alone never evicts here
        active_segments_max=3,
        segment_evict_interval_ms=10,
    )
    s, c = await started(tmp_path, wall, cfg)
    for k in range(10):
        await s.create_segment(f"s{k}")
        await s.append(f"s{k}", bytes([k]) * 100)
        wall.now += 1  # s9 is the most recent
    await until(lambda: len(c.md.by_name) <= 3)
    assert set(c.md.by_name) == {"s7", "s8", "s9"}
    for k in range(10):
        assert await read_all(s, f"s{k}") == bytes([k]) * 100
    await s.close()


async def test_segment_used_while_its_record_is_written_stays(tmp_path: Path) -> None:
    wall = Clock()
    s, c = await started(tmp_path, wall)
    await s.create_segment("a")
    await s.append("a", b"x" * 100)
    await s.create_segment("b")
    await s.append("b", b"y" * 100)
    wall.now += 61
    inactive = c.inactive
    assert inactive is not None
    loop = asyncio.get_running_loop()
    real_put = inactive.put_many
    appended = threading.Event()
    tasks: list[asyncio.Task[int]] = []

    def put_many(records: dict[str, bytes]) -> None:
        real_put(records)
        # An append to "a" is queued while the records are being written.
        loop.call_soon_threadsafe(
            lambda: tasks.append(loop.create_task(s.append("a", b"z"))) or appended.set()
        )
        appended.wait(5)

    inactive.put_many = put_many  # type: ignore[method-assign]
    await c.writer.evict_now()
    assert "a" in c.md.by_name and "b" not in c.md.by_name
    assert await tasks[0] == 100
    assert await read_all(s, "a") == b"x" * 100 + b"z"
    assert await read_all(s, "b") == b"y" * 100
    await s.close()


async def test_stop_while_records_are_written(tmp_path: Path) -> None:
    """The container stops (closing the RocksDB store) while the writer's thread is
    still writing records: the stop waits for that write (not a write into a closed
    store), and nothing is lost."""
    wall = Clock()
    s, c = await started(tmp_path, wall)
    await s.create_segment("a")
    await s.append("a", b"x" * 100)
    wall.now += 61
    inactive = c.inactive
    assert inactive is not None
    real_put = inactive.put_many
    writing = threading.Event()

    def slow_put(records: dict[str, bytes]) -> None:
        writing.set()
        time.sleep(0.3)
        real_put(records)

    inactive.put_many = slow_put  # type: ignore[method-assign]
    evicting = asyncio.ensure_future(c.writer.evict_now())
    await until(writing.is_set)
    evicting.cancel()
    await s.close()
    s, c = await started(tmp_path, wall)
    assert c.inactive is not None and c.inactive.names() == ["a"]  # the write ended first
    assert await read_all(s, "a") == b"x" * 100
    await s.close()


async def test_choosing_what_leaves_memory_takes_bounded_loop_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container of tens of thousands of segments is looked over a slice per event-loop
    step, so a produce beside very large topics never waits for the whole pass (issue 35
    item 9); the segments still leave memory and come back."""
    monkeypatch.setattr(eviction, "SEGMENTS_PER_STEP", 8, raising=False)
    wall = Clock()
    s, c = await started(tmp_path, wall)
    for k in range(40):
        await s.create_segment(f"s{k}")
        await s.append(f"s{k}", bytes([k]) * 10)
    wall.now += 61  # every one idle
    loop = asyncio.get_running_loop()
    turn = [0]
    ticking = [True]

    def tick() -> None:  # once per loop iteration: what runs between two ticks is one turn
        turn[0] += 1
        if ticking[0]:
            loop.call_soon(tick)

    looked: collections.Counter[int] = collections.Counter()
    can_leave = StorageWriter._can_leave

    def counted(self: StorageWriter, m: SegmentMeta, busy: set[int]) -> bool:
        looked[turn[0]] += 1
        return can_leave(self, m, busy)

    monkeypatch.setattr(StorageWriter, "_can_leave", counted)
    loop.call_soon(tick)
    await c.writer.evict_now()
    ticking[0] = False
    assert sum(looked.values()) >= 80  # every segment looked at, then checked again
    assert max(looked.values()) <= 8
    assert not any(name.startswith("s") for name in c.md.by_name)
    for k in range(40):
        assert await read_all(s, f"s{k}") == bytes([k]) * 10
    await s.close()
