"""Scale and truncate workflows, successors/predecessors, StreamCut arithmetic."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    InvalidArgumentError,
    KeyRange,
    ScalingPolicy,
    ScopeNotFoundError,
    StreamConfig,
    StreamNotFoundError,
    StreamState,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.keyspace import is_cover, split
from tidegate.core.segmentstore.api import SegmentNotFoundError, SegmentStore
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import QUIET, Clock


def name(seg: int) -> str:
    return qualified_segment_name("s", "t", seg)


@pytest.fixture
async def two(ctl: StreamController) -> StreamController:
    await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=2)))
    return ctl


S0, S1 = segment_id(0, 0), segment_id(0, 1)


async def test_split_and_merge(
    two: StreamController, store: InMemorySegmentStore, clock: Clock
) -> None:
    ctl = two
    await store.append(name(S0), b"x" * 10)
    clock.advance(1)
    e1 = await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    assert e1.epoch == 1
    a, b = segment_id(1, 2), segment_id(1, 3)
    assert [s.id for s in e1.segments] == [a, b, S1]
    assert (await ctl.get_stream("s", "t")).current_epoch == 1
    assert (await store.get_info(name(S0))).sealed
    assert not (await store.get_info(name(a))).sealed
    assert (await ctl.get_segment_for_key("s", "t", 0.3)).id == b
    succ = await ctl.get_successors("s", "t", S0)
    assert {s.id: p for s, p in succ.items()} == {a: [S0], b: [S0]}
    assert await ctl.get_successors("s", "t", S1) == {}
    pred = await ctl.get_predecessors("s", "t", a)
    assert {s.id: p for s, p in pred.items()} == {S0: [a, b]}
    assert await ctl.get_sealed_sizes("s", "t") == {S0: 10}

    clock.advance(1)
    e2 = await ctl.scale("s", "t", [b, S1], [KeyRange(0.25, 1.0)])
    c = segment_id(2, 4)
    assert [s.id for s in e2.segments] == [a, c]
    succ = await ctl.get_successors("s", "t", S1)
    assert {s.id: p for s, p in succ.items()} == {c: sorted([b, S1])}
    pred = await ctl.get_predecessors("s", "t", c)
    assert {s.id: p for s, p in pred.items()} == {b: [c], S1: [c]}
    epochs = await ctl.get_epochs("s", "t")
    assert [e.epoch for e in epochs] == [0, 1, 2]
    t0 = epochs[0].creation_time_ms
    assert (await ctl.get_segments_at("s", "t", t0 - 5)).epoch == 0
    assert (await ctl.get_segments_at("s", "t", t0 + 1500)).epoch == 1
    assert (await ctl.get_segments_at("s", "t", t0 + 99_000)).epoch == 2


async def test_invalid_scales(two: StreamController) -> None:
    ctl = two
    cases = [
        ([], [KeyRange(0.0, 0.5)]),
        ([S0], []),
        ([S0], [KeyRange(0.0, 0.4)]),
        ([S0], [KeyRange(0.0, 0.3), KeyRange(0.2, 0.5)]),
        ([S0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.6)]),
        ([S0, S0], [KeyRange(0.0, 0.5)]),
        ([segment_id(7, 7)], [KeyRange(0.0, 0.5)]),
        ([S0], [KeyRange(0.0, 0.25), KeyRange(0.2500001, 0.5)]),
        ([S0], [KeyRange(-0.5, 0.5)]),
    ]
    for sealed, ranges in cases:
        with pytest.raises(InvalidArgumentError):
            await ctl.scale("s", "t", sealed, ranges)
    assert (await ctl.get_stream("s", "t")).current_epoch == 0
    assert (await ctl.get_stream("s", "t")).state == StreamState.ACTIVE
    await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.5)])
    # a second identical request conflicts with the scale that already happened
    with pytest.raises(ConflictError):
        await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.5)])


async def test_merge_non_adjacent_rejected_unless_covered(ctl: StreamController) -> None:
    await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=4)))
    ids = [s.id for s in await ctl.get_current_segments("s", "t")]
    # two non-adjacent segments may be replaced by two ranges covering exactly them
    e = await ctl.scale("s", "t", [ids[0], ids[2]], [KeyRange(0.0, 0.25), KeyRange(0.5, 0.75)])
    assert len(e.segments) == 4
    with pytest.raises(InvalidArgumentError):
        await ctl.scale("s", "t", [ids[1], ids[3]], [KeyRange(0.25, 1.0)])


async def test_truncate(two: StreamController, store: InMemorySegmentStore) -> None:
    ctl = two
    await store.append(name(S0), b"a" * 100)
    await store.append(name(S1), b"b" * 50)
    await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.5)])
    n = segment_id(1, 2)
    await store.append(name(n), b"c" * 30)
    head = await ctl.get_head_segments("s", "t")
    assert head == {S0: 0, S1: 0}
    await ctl.truncate("s", "t", {S0: 40, S1: 20})
    assert (await store.get_info(name(S0))).start_offset == 40
    assert await ctl.get_head_segments("s", "t") == {S0: 40, S1: 20}
    # backwards
    with pytest.raises(ConflictError):
        await ctl.truncate("s", "t", {S0: 30, S1: 20})
    # inconsistent / invalid cuts
    for bad in ({S0: 50}, {S0: 50, n: 1, S1: 20}, {n: 10}, {n: 31, S1: 20}, {S0: -1, S1: 20}, {}):
        with pytest.raises(InvalidArgumentError):
            await ctl.truncate("s", "t", bad)
    await ctl.truncate("s", "t", {n: 10, S1: 25})
    with pytest.raises(SegmentNotFoundError):
        await store.get_info(name(S0))
    assert (await store.get_info(name(n))).start_offset == 10
    assert (await store.get_info(name(S1))).start_offset == 25
    assert await ctl.get_head_segments("s", "t") == {n: 10, S1: 25}
    # the same cut again is allowed (not backwards) and changes nothing
    await ctl.truncate("s", "t", {n: 10, S1: 25})
    assert (await ctl.get_stream("s", "t")).state == StreamState.ACTIVE


async def test_streamcut_arithmetic(two: StreamController, store: InMemorySegmentStore) -> None:
    ctl = two
    await store.append(name(S0), b"a" * 100)
    await store.append(name(S1), b"b" * 50)
    await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    a, b = segment_id(1, 2), segment_id(1, 3)
    await store.append(name(a), b"c" * 7)
    await store.append(name(b), b"d" * 9)
    start = {S0: 0, S1: 0}
    mid = {S0: 60, S1: 10}
    end = {a: 7, b: 9, S1: 50}
    assert await ctl.is_cut_ge("s", "t", end, start)
    assert await ctl.is_cut_ge("s", "t", mid, start)
    assert not await ctl.is_cut_ge("s", "t", start, mid)
    assert await ctl.is_cut_ge("s", "t", end, end)
    assert await ctl.bytes_between("s", "t", end, start) == 100 + 50 + 7 + 9
    assert await ctl.bytes_between("s", "t", end, mid) == 40 + 40 + 7 + 9
    assert await ctl.bytes_between("s", "t", {a: 3, b: 0, S1: 10}, mid) == 40 + 3
    with pytest.raises(ConflictError):
        await ctl.bytes_between("s", "t", start, end)
    with pytest.raises(InvalidArgumentError):
        await ctl.is_cut_ge("s", "t", {a: 0, S1: 0}, start)
    assert await ctl.get_tail_cut("s", "t") == end


async def test_concurrent_scales(two: StreamController) -> None:
    ctl = two
    # overlapping: one wins, the other finds its segment sealed
    results = await asyncio.gather(
        ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)]),
        ctl.scale("s", "t", [S0, S1], [KeyRange(0.0, 1.0)]),
        return_exceptions=True,
    )
    assert sum(isinstance(r, ConflictError) for r in results) == 1
    assert sum(isinstance(r, EpochRecord) for r in results) == 1
    # disjoint: both apply, one after the other
    segs = await ctl.get_current_segments("s", "t")
    a, b = segs[0], segs[-1]
    await asyncio.gather(
        ctl.scale("s", "t", [a.id], split(a.key_start, a.key_end, 2)),
        ctl.scale("s", "t", [b.id], split(b.key_start, b.key_end, 2)),
    )
    epochs = await ctl.get_epochs("s", "t")
    assert len(epochs) == 4
    assert all(is_cover([s.key_range for s in e.segments]) for e in epochs)


async def test_malformed_arguments(two: StreamController) -> None:
    ctl = two
    bad_calls = [
        ctl.scale("s", "t", [S0], [(0.0, 0.5)]),  # type: ignore[list-item]
        ctl.scale("s", "t", ["x"], [KeyRange(0.0, 0.5)]),  # type: ignore[list-item]
        ctl.truncate("s", "t", {S0: "1", S1: 0}),  # type: ignore[dict-item]
        ctl.truncate("s", "t", [S0]),  # type: ignore[arg-type]
        ctl.get_segment_for_key("s", "t", float("nan")),
        ctl.create_stream("s", "u", "config"),  # type: ignore[arg-type]
        ctl.create_stream("s", "u", StreamConfig(tags=["a"])),  # type: ignore[arg-type]
        ctl.get_successors("s", "t", 12345),
    ]
    for call in bad_calls:
        with pytest.raises(InvalidArgumentError):
            await call
    with pytest.raises(StreamNotFoundError):
        await ctl.get_stream("s", "nope")
    with pytest.raises(ScopeNotFoundError):
        await ctl.get_stream("nope", "t")


async def test_busy_stream_times_out_with_conflict(store: SegmentStore, clock: Clock) -> None:
    ctl = StreamController(store, replace(QUIET, workflow_lock_timeout_ms=50), clock=clock)
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", StreamConfig())
    async with ctl.workflow_lock("s", "t"):
        with pytest.raises(ConflictError, match="busy"):
            await ctl.seal_stream("s", "t")
    await ctl.seal_stream("s", "t")
    await ctl.close()
