"""Scopes and streams: create, get, list, update, seal, delete, segment queries."""

from __future__ import annotations

import pytest
from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    KeyRange,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    ScopeExistsError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamConfig,
    StreamExistsError,
    StreamNotFoundError,
    StreamState,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.api import SegmentNotFoundError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import QUIET, Clock


def fixed(n: int) -> StreamConfig:
    return StreamConfig(scaling=ScalingPolicy(min_segments=n))


async def test_scopes(ctl: StreamController) -> None:
    await ctl.create_scope("other")
    assert sorted(await ctl.list_scopes()) == ["other", "s"]
    with pytest.raises(ScopeExistsError):
        await ctl.create_scope("other")
    with pytest.raises(InvalidArgumentError):
        await ctl.create_scope("bad/name")
    with pytest.raises(InvalidArgumentError):
        await ctl.create_scope("")
    await ctl.create_stream("other", "t", fixed(1))
    with pytest.raises(ScopeNotEmptyError):
        await ctl.delete_scope("other")
    await ctl.seal_stream("other", "t")
    await ctl.delete_stream("other", "t")
    await ctl.delete_scope("other")
    assert await ctl.list_scopes() == ["s"]
    with pytest.raises(ScopeNotFoundError):
        await ctl.delete_scope("other")
    with pytest.raises(ScopeNotFoundError):
        await ctl.create_stream("other", "t", fixed(1))


async def test_create_equal_segments(
    ctl: StreamController, store: InMemorySegmentStore, clock: Clock
) -> None:
    info = await ctl.create_stream("s", "t", fixed(4))
    assert info.state == StreamState.ACTIVE
    assert info.current_epoch == 0
    assert info.creation_time_ms == int(clock() * 1000)
    segs = await ctl.get_current_segments("s", "t")
    assert [(s.key_start, s.key_end) for s in segs] == [
        (0.0, 0.25),
        (0.25, 0.5),
        (0.5, 0.75),
        (0.75, 1.0),
    ]
    assert [s.id for s in segs] == [segment_id(0, i) for i in range(4)]
    for s in segs:
        info2 = await store.get_info(qualified_segment_name("s", "t", s.id))
        assert not info2.sealed
    assert (await ctl.get_segment_for_key("s", "t", 0.3)).id == segment_id(0, 1)
    assert (await ctl.get_segment_for_key("s", "t", 0.0)).id == segment_id(0, 0)
    assert (await ctl.get_segment_for_key("s", "t", 0.75)).id == segment_id(0, 3)
    with pytest.raises(InvalidArgumentError):
        await ctl.get_segment_for_key("s", "t", 1.0)
    assert await ctl.get_head_segments("s", "t") == {s.id: 0 for s in segs}
    with pytest.raises(StreamExistsError):
        await ctl.create_stream("s", "t", fixed(1))


async def test_create_explicit_ranges(ctl: StreamController) -> None:
    ranges = [KeyRange(0.5, 1.0), KeyRange(0.0, 0.125), KeyRange(0.125, 0.5)]
    await ctl.create_stream("s", "k", fixed(1), ranges)
    segs = await ctl.get_current_segments("s", "k")
    # numbered in the order given, listed in key order
    assert [(s.number, s.key_start) for s in segs] == [(1, 0.0), (2, 0.125), (0, 0.5)]
    for bad in (
        [KeyRange(0.0, 0.5)],
        [KeyRange(0.0, 0.6), KeyRange(0.5, 1.0)],
        [KeyRange(0.0, 0.5), KeyRange(0.5000001, 1.0)],
        [KeyRange(0.0, 1.0), KeyRange(0.0, 1.0)],
        [KeyRange(0.5, 0.5), KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)],
        [KeyRange(0.0, float("nan")), KeyRange(0.5, 1.0)],
        [],
    ):
        with pytest.raises(InvalidArgumentError):
            await ctl.create_stream("s", "bad", fixed(1), bad)
    with pytest.raises(StreamNotFoundError):
        await ctl.get_stream("s", "bad")


async def test_invalid_configs(ctl: StreamController) -> None:
    bad = [
        StreamConfig(scaling=ScalingPolicy(min_segments=0)),
        StreamConfig(scaling=ScalingPolicy(ScalingType.BY_RATE_IN_EVENTS_PER_SEC, 0, 2, 1)),
        StreamConfig(scaling=ScalingPolicy(ScalingType.BY_RATE_IN_KBYTES_PER_SEC, 10, 0, 1)),
        StreamConfig(retention=RetentionPolicy(RetentionType.TIME, 0)),
        StreamConfig(tags=("a", "a")),
        StreamConfig(tags=("",)),
    ]
    for c in bad:
        with pytest.raises(InvalidArgumentError):
            await ctl.create_stream("s", "t", c)


async def test_list_update_tags(ctl: StreamController) -> None:
    await ctl.create_stream("s", "a", StreamConfig(tags=("x", "y")))
    await ctl.create_stream("s", "b", StreamConfig(tags=("y",)))
    assert sorted(await ctl.list_streams("s")) == ["a", "b"]
    assert await ctl.list_streams("s", tag="x") == ["a"]
    assert sorted(await ctl.list_streams("s", tag="y")) == ["a", "b"]
    new = StreamConfig(
        scaling=ScalingPolicy(ScalingType.BY_RATE_IN_EVENTS_PER_SEC, 100, 3, 2),
        retention=RetentionPolicy(RetentionType.SIZE, 1 << 20),
        tags=("z",),
    )
    info = await ctl.update_stream("s", "a", new)
    assert info.config == new
    assert info.state == StreamState.ACTIVE
    assert (await ctl.get_stream("s", "a")).config == new
    assert await ctl.list_streams("s", tag="x") == []
    assert await ctl.list_streams("s", tag="z") == ["a"]
    assert await ctl.list_streams("s", tag="y") == ["b"]
    with pytest.raises(StreamNotFoundError):
        await ctl.update_stream("s", "nope", new)


async def test_seal_and_delete(ctl: StreamController, store: InMemorySegmentStore) -> None:
    await ctl.create_stream("s", "t", fixed(2), None)
    with pytest.raises(ConflictError):
        await ctl.delete_stream("s", "t")
    await store.append(qualified_segment_name("s", "t", segment_id(0, 0)), b"abc")
    await ctl.seal_stream("s", "t")
    await ctl.seal_stream("s", "t")  # idempotent
    assert (await ctl.get_stream("s", "t")).state == StreamState.SEALED
    for s in await ctl.get_current_segments("s", "t"):
        assert (await store.get_info(qualified_segment_name("s", "t", s.id))).sealed
    assert await ctl.get_sealed_sizes("s", "t") == {segment_id(0, 0): 3, segment_id(0, 1): 0}
    with pytest.raises(ConflictError):
        await ctl.update_stream("s", "t", fixed(2))
    with pytest.raises(ConflictError):
        await ctl.scale("s", "t", [segment_id(0, 0)], [KeyRange(0.0, 0.5)])
    await ctl.delete_stream("s", "t")
    with pytest.raises(StreamNotFoundError):
        await ctl.get_stream("s", "t")
    with pytest.raises(SegmentNotFoundError):
        await store.get_info(qualified_segment_name("s", "t", segment_id(0, 0)))
    assert await ctl.list_streams("s") == []
    # the name can be used again
    await ctl.create_stream("s", "t", fixed(1))
    assert len(await ctl.get_current_segments("s", "t")) == 1


async def test_metadata_survives_restart(store: InMemorySegmentStore, clock: Clock) -> None:
    a = StreamController(store, QUIET, clock=clock)
    await a.start()
    await a.create_scope("s")
    await a.create_stream("s", "t", fixed(3))
    await a.close()
    b = StreamController(store, QUIET, clock=clock)
    await b.start()
    assert await b.list_scopes() == ["s"]
    assert len(await b.get_current_segments("s", "t")) == 3
    await b.close()
