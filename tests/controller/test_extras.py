"""Key-value tables, reader groups with subscriber StreamCuts, watermarks."""

from __future__ import annotations

import pytest
from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    KeyRange,
    KeyValueTableExistsError,
    KeyValueTableNotFoundError,
    ReaderGroupConfig,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
    ReaderGroupRetention,
    RetentionPolicy,
    RetentionType,
    ScopeNotEmptyError,
    StreamConfig,
    StreamNotFoundError,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.api import SegmentNotFoundError, SegmentStore, TableUpdate

from tests.controller.conftest import QUIET, Clock

S0 = segment_id(0, 0)


async def test_kv_tables(ctl: StreamController, store: SegmentStore) -> None:
    info = await ctl.kv_tables.create("s", "kv", 3)
    assert info.partitions == 3 and info.state == "ACTIVE"
    assert len(set(info.segments)) == 3
    await store.table_put(info.segments[1], [TableUpdate(b"k", b"v")])
    assert await ctl.kv_tables.list("s") == ["kv"]
    with pytest.raises(KeyValueTableExistsError):
        await ctl.kv_tables.create("s", "kv", 1)
    with pytest.raises(InvalidArgumentError):
        await ctl.kv_tables.create("s", "kv2", 0)
    with pytest.raises(ScopeNotEmptyError):
        await ctl.delete_scope("s")
    await ctl.kv_tables.delete("s", "kv")
    with pytest.raises(KeyValueTableNotFoundError):
        await ctl.kv_tables.get("s", "kv")
    with pytest.raises(SegmentNotFoundError):
        await store.table_get(info.segments[1], [b"k"])
    await ctl.delete_scope("s")


async def test_kv_table_create_resumed(store: SegmentStore, clock: Clock) -> None:
    a = StreamController(store, QUIET, clock=clock)
    await a.start()
    await a.create_scope("s")
    # a create that got as far as taking the name
    await a.md.put(
        a.md.scope_table("s"), {"kvt/kv": {"partitions": 2, "state": "CREATING", "created": 1}}
    )
    await a.close()
    b = StreamController(store, QUIET, clock=clock)
    await b.start()
    info = await b.kv_tables.get("s", "kv")
    assert info.state == "ACTIVE"
    for seg in info.segments:
        assert await store.table_entries(seg) == []
    await b.close()


async def test_reader_group_subscriptions_hold_back_retention(
    ctl: StreamController, store: SegmentStore, clock: Clock
) -> None:
    await ctl.create_stream(
        "s", "t", StreamConfig(retention=RetentionPolicy(RetentionType.SIZE, 10))
    )
    await ctl.create_stream("s", "u", StreamConfig())
    cfg = ReaderGroupConfig(
        streams={"s/t": None}, retention=ReaderGroupRetention.MANUAL_RELEASE_AT_USER_STREAMCUT
    )
    rg = await ctl.reader_groups.create("s", "rg", cfg)
    assert rg.generation == 0
    with pytest.raises(ReaderGroupExistsError):
        await ctl.reader_groups.create("s", "rg", cfg)
    with pytest.raises(StreamNotFoundError):
        await ctl.reader_groups.create("s", "rg2", ReaderGroupConfig(streams={"s/nope": None}))
    with pytest.raises(InvalidArgumentError):
        await ctl.reader_groups.create("s", "rg2", ReaderGroupConfig(streams={"nope": None}))
    assert await ctl.reader_groups.subscribers("s", "t") == {"s/rg": {S0: 0}}
    seg = qualified_segment_name("s", "t", S0)
    await store.append(seg, b"x" * 100)
    await ctl.retention.run_once()
    clock.advance(1)
    await store.append(seg, b"x" * 100)
    await ctl.retention.run_once()
    # size policy would truncate at 100, but the subscriber has read nothing
    assert await ctl.get_head_segments("s", "t") == {S0: 0}
    await ctl.reader_groups.update_subscriber_cut("s", "t", "s", "rg", 0, {S0: 150})
    with pytest.raises(ConflictError):
        await ctl.reader_groups.update_subscriber_cut("s", "t", "s", "rg", 0, {S0: 120})
    with pytest.raises(ConflictError):
        await ctl.reader_groups.update_subscriber_cut("s", "t", "s", "rg", 5, {S0: 160})
    clock.advance(1)
    await ctl.retention.run_once()
    assert await ctl.get_head_segments("s", "t") == {S0: 100}
    # update: read u instead of t -> the subscription on t goes, one on u appears
    rg = await ctl.reader_groups.update(
        "s",
        "rg",
        ReaderGroupConfig(
            streams={"s/u": None},
            retention=ReaderGroupRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT,
        ),
    )
    assert rg.generation == 1
    assert await ctl.reader_groups.subscribers("s", "t") == {}
    assert list(await ctl.reader_groups.subscribers("s", "u")) == ["s/rg"]
    assert await ctl.reader_groups.list("s") == ["rg"]
    await ctl.reader_groups.delete("s", "rg")
    assert await ctl.reader_groups.subscribers("s", "u") == {}
    with pytest.raises(ReaderGroupNotFoundError):
        await ctl.reader_groups.get("s", "rg")


async def test_watermarks(ctl: StreamController, clock: Clock) -> None:
    await ctl.create_stream("s", "t", StreamConfig())
    await ctl.watermarks.note_writer_mark("s", "t", "w1", 1000, {S0: 10})
    await ctl.watermarks.note_writer_mark("s", "t", "w2", 2000, {S0: 30})
    meta = await ctl.stream_meta("s", "t")
    wm = await ctl.watermarks.compute(meta)
    assert wm is not None and (wm.lower_time_ms, wm.upper_time_ms, dict(wm.stream_cut)) == (
        1000,
        2000,
        {S0: 30},
    )
    assert await ctl.watermarks.compute(meta) is None  # no progress, no new watermark
    with pytest.raises(ConflictError):
        await ctl.watermarks.note_writer_mark("s", "t", "w1", 900, {S0: 20})
    with pytest.raises(ConflictError):
        await ctl.watermarks.note_writer_mark("s", "t", "w1", 1100, {S0: 5})
    with pytest.raises(InvalidArgumentError):
        await ctl.watermarks.note_writer_mark("s", "t", "w1", 1100, {segment_id(9, 9): 5})
    await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)])
    a = segment_id(1, 1)
    await ctl.watermarks.note_writer_mark("s", "t", "w1", 2500, {S0: 40, a: 7})
    clock.advance(1)
    wm = await ctl.watermarks.compute(meta)
    assert wm is not None and (wm.lower_time_ms, dict(wm.stream_cut)) == (2000, {a: 7})
    # an idle writer stops holding the watermark back
    clock.advance(ctl.config.watermark_writer_timeout_ms / 1000 - 0.5)
    await ctl.watermarks.note_writer_mark("s", "t", "w1", 5000, {a: 9})
    clock.advance(1)
    wm = await ctl.watermarks.compute(meta)
    assert wm is not None and wm.lower_time_ms == 5000
    assert [w.lower_time_ms for w in await ctl.watermarks.get("s", "t")] == [1000, 2000, 5000]
    assert [w.lower_time_ms for w in await ctl.watermarks.get("s", "t", since_ms=1500)] == [
        2000,
        5000,
    ]
