"""Stream transactions: create, ping, commit in order, abort, lease expiry, rolling."""

from __future__ import annotations

import asyncio

import pytest
from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    KeyRange,
    ScalingPolicy,
    StreamConfig,
    StreamState,
    TransactionNotFoundError,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.keyspace import is_cover
from tidegate.core.segmentstore.api import SegmentNotFoundError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import QUIET, Clock

S0, S1 = segment_id(0, 0), segment_id(0, 1)


def name(seg: int) -> str:
    return qualified_segment_name("s", "t", seg)


async def read_all(store: InMemorySegmentStore, seg: str) -> bytes:
    info = await store.get_info(seg)
    r = await store.read(seg, info.start_offset, info.length)
    return b"".join(bytes(c) for c in r.chunks)


@pytest.fixture
async def two(ctl: StreamController) -> StreamController:
    await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=2)))
    return ctl


async def test_commit_merges_in_commit_order(
    two: StreamController, store: InMemorySegmentStore
) -> None:
    ctl = two
    t1 = await ctl.create_transaction("s", "t")
    t2 = await ctl.create_transaction("s", "t")
    assert t1.id != t2.id
    assert t1.epoch == 0 and [s.id for s in t1.segments] == [S0, S1]
    assert {t.id for t in await ctl.list_transactions("s", "t")} == {t1.id, t2.id}
    await store.append(name(S0), b"before|")
    await store.append(ctl.transaction_segment_name("s", "t", S0, t1.id), b"one|")
    await store.append(ctl.transaction_segment_name("s", "t", S0, t2.id), b"two|")
    await store.append(ctl.transaction_segment_name("s", "t", S1, t2.id), b"2b|")
    await ctl.commit_transaction("s", "t", t2.id)
    await ctl.commit_transaction("s", "t", t1.id)
    await ctl.commit_transaction("s", "t", t1.id)  # again: nothing happens
    assert await read_all(store, name(S0)) == b"before|two|one|"
    assert await read_all(store, name(S1)) == b"2b|"
    assert (await ctl.get_transaction("s", "t", t1.id)).state == "COMMITTED"
    assert await ctl.list_transactions("s", "t") == []
    with pytest.raises(ConflictError):
        await ctl.abort_transaction("s", "t", t1.id)
    with pytest.raises(SegmentNotFoundError):
        await store.get_info(ctl.transaction_segment_name("s", "t", S0, t1.id))


async def test_abort(two: StreamController, store: InMemorySegmentStore) -> None:
    ctl = two
    t = await ctl.create_transaction("s", "t")
    await store.append(ctl.transaction_segment_name("s", "t", S0, t.id), b"x")
    await ctl.abort_transaction("s", "t", t.id)
    await ctl.abort_transaction("s", "t", t.id)
    assert (await ctl.get_transaction("s", "t", t.id)).state == "ABORTED"
    with pytest.raises(SegmentNotFoundError):
        await store.get_info(ctl.transaction_segment_name("s", "t", S0, t.id))
    with pytest.raises(ConflictError):
        await ctl.commit_transaction("s", "t", t.id)
    assert (await store.get_info(name(S0))).length == 0
    with pytest.raises(TransactionNotFoundError):
        await ctl.commit_transaction("s", "t", "nope")


async def test_lease_ping_and_expiry(two: StreamController, clock: Clock) -> None:
    ctl = two
    with pytest.raises(InvalidArgumentError):
        await ctl.create_transaction("s", "t", lease_ms=0)
    with pytest.raises(InvalidArgumentError):
        await ctl.create_transaction("s", "t", lease_ms=10**9)
    t = await ctl.create_transaction("s", "t", lease_ms=1000)
    u = await ctl.create_transaction("s", "t", lease_ms=1000)
    clock.advance(0.8)
    t = await ctl.ping_transaction("s", "t", t.id, 1000)
    clock.advance(0.8)
    await ctl.txns.expire()
    assert (await ctl.get_transaction("s", "t", t.id)).state == "OPEN"
    assert (await ctl.get_transaction("s", "t", u.id)).state == "ABORTED"
    with pytest.raises(ConflictError):
        await ctl.ping_transaction("s", "t", u.id)
    clock.advance(5)
    with pytest.raises(ConflictError):
        await ctl.commit_transaction("s", "t", t.id)
    assert (await ctl.get_transaction("s", "t", t.id)).state == "ABORTED"
    # completed records are dropped after the retention
    clock.advance(ctl.config.txn_completed_retention_ms / 1000 + 1)
    await ctl.txns.expire()
    with pytest.raises(TransactionNotFoundError):
        await ctl.get_transaction("s", "t", t.id)


async def test_background_timeout(store: InMemorySegmentStore, clock: Clock) -> None:
    config = ControllerConfig(
        autoscale_period_ms=0,
        retention_period_ms=0,
        txn_timeout_check_period_ms=20,
        watermark_period_ms=0,
    )
    ctl = StreamController(store, config, clock=clock)
    await ctl.start()
    try:
        await ctl.create_scope("s")
        await ctl.create_stream("s", "t", StreamConfig())
        t = await ctl.create_transaction("s", "t", lease_ms=100)
        clock.advance(1)
        for _ in range(1000):  # up to ~10 s on a loaded machine
            if (await ctl.get_transaction("s", "t", t.id)).state == "ABORTED":
                break
            await asyncio.sleep(0.01)
        assert (await ctl.get_transaction("s", "t", t.id)).state == "ABORTED"
    finally:
        await ctl.close()


async def test_rolling_transaction(two: StreamController, store: InMemorySegmentStore) -> None:
    ctl = two
    t = await ctl.create_transaction("s", "t")
    await store.append(ctl.transaction_segment_name("s", "t", S0, t.id), b"txn0")
    await store.append(ctl.transaction_segment_name("s", "t", S1, t.id), b"txn1")
    await store.append(name(S0), b"old0")
    await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    a = segment_id(1, 2)
    await store.append(name(a), b"new-a")
    await ctl.commit_transaction("s", "t", t.id)
    epochs = await ctl.get_epochs("s", "t")
    assert [e.epoch for e in epochs] == [0, 1, 2, 3]
    for e in epochs:
        assert is_cover([s.key_range for s in e.segments])
    dup = epochs[2]
    # the transaction's epoch duplicated: same ranges as epoch 0, new ids, sealed, holding the data
    assert [(s.key_start, s.key_end) for s in dup.segments] == [(0.0, 0.5), (0.5, 1.0)]
    assert await read_all(store, name(dup.segments[0].id)) == b"txn0"
    assert await read_all(store, name(dup.segments[1].id)) == b"txn1"
    for s in dup.segments:
        assert (await store.get_info(name(s.id))).sealed
    # epoch 3 duplicates epoch 1 and is writable
    assert [(s.key_start, s.key_end) for s in epochs[3].segments] == [
        (s.key_start, s.key_end) for s in epochs[1].segments
    ]
    for s in epochs[3].segments:
        assert not (await store.get_info(name(s.id))).sealed
    # successors of the segments sealed by the roll are the duplicates
    succ = await ctl.get_successors("s", "t", a)
    assert [s.id for s in succ] == [dup.segments[0].id]
    succ = await ctl.get_successors("s", "t", dup.segments[0].id)
    assert sorted(s.key_start for s in succ) == [0.0, 0.25]
    assert (await ctl.get_stream("s", "t")).state == StreamState.ACTIVE
    assert await ctl.get_sealed_sizes("s", "t") == {
        S0: 4,
        a: 5,
        segment_id(1, 3): 0,
        S1: 0,
        dup.segments[0].id: 4,
        dup.segments[1].id: 4,
    }


async def test_seal_aborts_open_transactions(
    two: StreamController, store: InMemorySegmentStore
) -> None:
    ctl = two
    t = await ctl.create_transaction("s", "t")
    await ctl.seal_stream("s", "t")
    assert (await ctl.get_transaction("s", "t", t.id)).state == "ABORTED"
    with pytest.raises(ConflictError):
        await ctl.create_transaction("s", "t")
    await ctl.delete_stream("s", "t")


async def test_transactions_survive_restart(store: InMemorySegmentStore, clock: Clock) -> None:
    a = StreamController(store, QUIET, clock=clock)
    await a.start()
    await a.create_scope("s")
    await a.create_stream("s", "t", StreamConfig())
    t = await a.create_transaction("s", "t", lease_ms=1000)
    await a.close()
    b = StreamController(store, QUIET, clock=clock)
    await b.start()
    clock.advance(2)
    await b.txns.expire()
    assert (await b.get_transaction("s", "t", t.id)).state == "ABORTED"
    await b.close()
