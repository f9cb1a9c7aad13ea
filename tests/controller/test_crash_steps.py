"""Crash at every step of every workflow (in-process fault injection), restart a new
controller on the same store, and check the stream is consistent and the workflow either
never started or is complete. The real-process ``kill -9`` tests are in
``test_crash_process.py``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tidegate.core.controller.api import (
    KeyRange,
    ScalingPolicy,
    StreamConfig,
    StreamNotFoundError,
    StreamState,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.keyspace import is_cover
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.segmentstore.api import SegmentNotFoundError, StoreShutdownError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import QUIET, Clock

MUTATING = {
    "create_segment",
    "append",
    "seal",
    "truncate",
    "merge",
    "delete_segment",
    "create_table",
    "delete_table",
    "table_put",
    "table_remove",
    "update_attributes",
}


class Crash(BaseException):
    """The process died here."""


class CrashingStore:
    """Passes calls to ``inner`` and dies instead of making mutating call number
    ``after`` (counting from 0)."""

    def __init__(self, inner: InMemorySegmentStore, after: int) -> None:
        self.inner = inner
        self.left = after

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in MUTATING:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.left == 0:
                raise Crash(name)
            self.left -= 1
            return await attr(*args, **kwargs)

        return call


S0, S1 = segment_id(0, 0), segment_id(0, 1)
Op = Callable[[StreamController], Awaitable[object]]


async def setup(store: InMemorySegmentStore, clock: Clock) -> str:
    ctl = StreamController(store, QUIET, clock=clock)
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=2)))
    await store.append(qualified_segment_name("s", "t", S0), b"a" * 100)
    await store.append(qualified_segment_name("s", "t", S1), b"b" * 100)
    txn = await ctl.create_transaction("s", "t", lease_ms=600_000)
    await store.append(ctl.transaction_segment_name("s", "t", S0, txn.id), b"txn")
    await ctl.close()
    return txn.id


async def check_consistent(ctl: StreamController) -> None:
    info = await ctl.get_stream("s", "t")
    meta = StreamMeta(ctl.md, "s", "t")
    assert (await meta.workflow()).value is None
    assert info.state in (StreamState.ACTIVE, StreamState.SEALED)
    epochs = await ctl.get_epochs("s", "t")
    for e in epochs:
        assert is_cover([s.key_range for s in e.segments])
    sealed = await ctl.get_sealed_sizes("s", "t")
    for s in epochs[-1].segments:
        props = await ctl.store.get_info(qualified_segment_name("s", "t", s.id))
        assert props.sealed == (info.state == StreamState.SEALED)
    for e in epochs[:-1]:
        for s in e.segments:
            if s.id not in {x.id for x in epochs[-1].segments}:
                assert s.id in sealed


async def crash_everywhere(op: Op, done: Callable[[StreamController, str], Awaitable[bool]]) -> int:
    """Crash ``op`` at each mutating call in turn; return how many crash points there were."""
    n = 0
    while True:
        clock = Clock()
        store = InMemorySegmentStore()
        txn = await setup(store, clock)
        crashing_store = CrashingStore(store, 10**9)
        crashing = StreamController(crashing_store, QUIET, clock=clock)  # type: ignore[arg-type]
        await crashing.start()
        crashing_store.left = n
        try:
            await op(crashing)
        except Crash:
            crashed = True
        else:
            crashed = False
        clock.advance(1)
        ctl = StreamController(store, QUIET, clock=clock)
        await ctl.start()
        completed = await done(ctl, txn)
        if completed is not None:
            await check_consistent(ctl)
        await ctl.close()
        if not crashed:
            assert completed
            return n
        n += 1
        assert n < 100


async def test_crash_during_scale() -> None:
    async def op(c: StreamController) -> object:
        return await c.scale("s", "t", [S0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])

    async def done(c: StreamController, txn: str) -> bool:
        epochs = await c.get_epochs("s", "t")
        if len(epochs) == 1:
            return False
        assert len(epochs) == 2 and len(epochs[1].segments) == 3
        return True

    assert await crash_everywhere(op, done) >= 4


async def test_crash_during_truncate() -> None:
    async def op(c: StreamController) -> object:
        await c.scale("s", "t", [S0], [KeyRange(0.0, 0.5)])
        return await c.truncate("s", "t", {segment_id(1, 2): 0, S1: 60})

    async def done(c: StreamController, txn: str) -> bool:
        head = await c.get_head_segments("s", "t")
        if head == {S0: 0, S1: 0}:
            return False
        assert head == {segment_id(1, 2): 0, S1: 60}
        with pytest.raises(SegmentNotFoundError):
            await c.store.get_info(qualified_segment_name("s", "t", S0))
        assert (await c.store.get_info(qualified_segment_name("s", "t", S1))).start_offset == 60
        return True

    assert await crash_everywhere(op, done) >= 4


async def test_crash_during_rolling_commit() -> None:
    async def op(c: StreamController) -> object:
        await c.scale("s", "t", [S1], [KeyRange(0.5, 1.0)])
        txn = (await c.list_transactions("s", "t"))[0].id
        return await c.commit_transaction("s", "t", txn)

    async def done(c: StreamController, txn: str) -> bool:
        state = (await c.get_transaction("s", "t", txn)).state
        if state == "OPEN":
            return False
        assert state == "COMMITTED"
        epochs = await c.get_epochs("s", "t")
        assert len(epochs) == 4
        dup = epochs[2].segments[0]
        r = await c.store.read(qualified_segment_name("s", "t", dup.id), 0, 100)
        assert b"".join(bytes(x) for x in r.chunks) == b"txn"
        return True

    assert await crash_everywhere(op, done) >= 6


async def test_crash_during_seal_and_delete() -> None:
    async def op(c: StreamController) -> object:
        await c.seal_stream("s", "t")
        return await c.delete_stream("s", "t")

    async def done(c: StreamController, txn: str) -> bool | None:
        try:
            state = (await c.get_stream("s", "t")).state
        except StreamNotFoundError:
            for seg in (S0, S1):
                with pytest.raises(SegmentNotFoundError):
                    await c.store.get_info(qualified_segment_name("s", "t", seg))
            assert await c.list_streams("s") == []
            return None  # gone: nothing left to check
        assert state in (StreamState.ACTIVE, StreamState.SEALED)
        return False

    n = 0
    while True:  # the final run completes the delete
        clock = Clock()
        store = InMemorySegmentStore()
        await setup(store, clock)
        crashing_store = CrashingStore(store, 10**9)
        crashing = StreamController(crashing_store, QUIET, clock=clock)  # type: ignore[arg-type]
        await crashing.start()
        crashing_store.left = n
        try:
            await op(crashing)
            crashed = False
        except Crash:
            crashed = True
        ctl = StreamController(store, QUIET, clock=clock)
        await ctl.start()
        result = await done(ctl, "")
        if result is not None:
            await check_consistent(ctl)
        await ctl.close()
        if not crashed:
            assert result is None
            break
        n += 1
    assert n >= 5


async def test_crash_during_create() -> None:
    n = 0
    while True:
        store = InMemorySegmentStore()
        clock = Clock()
        boot = StreamController(store, QUIET, clock=clock)
        await boot.start()
        await boot.create_scope("s")
        crashing_store = CrashingStore(store, 10**9)
        crashing = StreamController(crashing_store, QUIET, clock=clock)  # type: ignore[arg-type]
        await crashing.start()
        crashing_store.left = n
        try:
            await crashing.create_stream(
                "s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=3))
            )
            crashed = False
        except Crash:
            crashed = True
        ctl = StreamController(store, QUIET, clock=clock)
        await ctl.start()
        try:
            await ctl.get_stream("s", "t")
        except StreamNotFoundError:
            assert crashed
        else:
            await check_consistent(ctl)
            assert len(await ctl.get_current_segments("s", "t")) == 3
            assert await ctl.list_streams("s") == ["t"]
        await ctl.close()
        if not crashed:
            break
        n += 1
    assert n >= 4


class FailingStore(CrashingStore):
    """Like ``CrashingStore`` but the call fails with a store error and the process
    lives on."""

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in MUTATING:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.left == 0:
                self.left = -1
                raise StoreShutdownError(str(args[0]) if args else name, "injected")
            if self.left > 0:
                self.left -= 1
            return await attr(*args, **kwargs)

        return call


async def test_failed_workflow_is_finished_by_the_next_call() -> None:
    clock = Clock()
    store = InMemorySegmentStore()
    await setup(store, clock)
    failing = FailingStore(store, 10**9)
    ctl = StreamController(failing, QUIET, clock=clock)  # type: ignore[arg-type]
    await ctl.start()
    failing.left = 2  # begin record, create one segment, then fail
    with pytest.raises(StoreShutdownError):
        await ctl.scale("s", "t", [S0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    assert (await ctl.get_stream("s", "t")).state == StreamState.SCALING
    # the next workflow call first finishes the recorded scale, then does its own work
    await ctl.scale("s", "t", [S1], [KeyRange(0.5, 1.0)])
    epochs = await ctl.get_epochs("s", "t")
    assert [len(e.segments) for e in epochs] == [2, 3, 3]
    await check_consistent(ctl)
    await ctl.close()


async def test_start_survives_a_workflow_that_keeps_failing() -> None:
    clock = Clock()
    store = InMemorySegmentStore()
    await setup(store, clock)
    crashing = CrashingStore(store, 10**9)
    c = StreamController(crashing, QUIET, clock=clock)  # type: ignore[arg-type]
    await c.start()
    crashing.left = 1
    with pytest.raises(Crash):
        await c.scale("s", "t", [S0], [KeyRange(0.0, 0.5)])
    failing = FailingStore(store, 2)  # after ensuring two tables, the recovery fails
    ctl = StreamController(failing, QUIET, clock=clock)  # type: ignore[arg-type]
    await ctl.start()  # logs the failure, does not raise
    assert (await ctl.get_stream("s", "t")).state == StreamState.SCALING
    await ctl.truncate("s", "t", {S0: 10, S1: 10})  # finishes the scale first
    assert len(await ctl.get_epochs("s", "t")) == 2
    await check_consistent(ctl)
    await ctl.close()


async def test_half_deleted_stream_is_finished_later() -> None:
    """A delete that got as far as dropping the stream's table: a restart whose recovery
    fails still starts, and the next workflow call on the name finishes the delete."""
    clock = Clock()
    store = InMemorySegmentStore()
    await setup(store, clock)
    ctl = StreamController(store, QUIET, clock=clock)
    await ctl.start()
    await ctl.seal_stream("s", "t")
    # the state a crash leaves after the delete's steps up to dropping the table
    await ctl.md.put(ctl.md.scope_table("s"), {"stream/t": {"delete": True}})
    for seg in (S0, S1):
        await store.delete_segment(qualified_segment_name("s", "t", seg))
    await ctl.md.drop_table(ctl.md.stream_table("s", "t"))
    await ctl.close()
    failing = FailingStore(store, 2)  # after ensuring two tables, the recovery fails
    ctl = StreamController(failing, QUIET, clock=clock)  # type: ignore[arg-type]
    await ctl.start()
    with pytest.raises(StreamNotFoundError):
        await ctl.get_stream("s", "t")
    await ctl.create_stream("s", "t", StreamConfig())  # finishes the delete, then creates
    assert len(await ctl.get_current_segments("s", "t")) == 1
    assert await ctl.list_streams("s") == ["t"]
    assert (await store.get_info(qualified_segment_name("s", "t", S0))).length == 0  # new
    await ctl.close()
