"""A hypothesis state machine over one stream: random scales, truncations at reader cuts,
transactions (committed, aborted, rolled over), appends, clean restarts and crashes at a
random step of the next operation. After every step the stream is consistent: no
workflow recorded, every epoch a cover, the store's segments agreeing with the metadata,
and committed transaction data present exactly once."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from tidegate.core.controller.api import (
    KeyRange,
    ScalingPolicy,
    StreamConfig,
    StreamState,
    qualified_segment_name,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.history import History
from tidegate.core.controller.keyspace import is_cover, split
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.segmentstore.api import SegmentNotFoundError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import QUIET, Clock
from tests.controller.test_crash_steps import Crash, CrashingStore


def name(seg: int) -> str:
    return qualified_segment_name("s", "t", seg)


class StreamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.store = InMemorySegmentStore()
        self.crash_at: int | None = None
        self.ctl = self.run(self._boot())
        self.committed: list[bytes] = []
        self.payload = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _boot(self) -> StreamController:
        ctl = StreamController(self.store, QUIET, clock=self.clock)
        await ctl.start()
        await ctl.create_scope("s")
        await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=2)))
        return ctl

    async def _restart(self) -> None:
        await self.ctl.close()
        self.clock.advance(1)
        self.ctl = StreamController(self.store, QUIET, clock=self.clock)
        await self.ctl.start()

    def op(self, coro_fn: Any) -> None:
        """Run an operation, possibly on a controller that dies at a chosen mutation."""
        if self.crash_at is None:
            self.run(coro_fn(self.ctl))
            return
        crashing = CrashingStore(self.store, 10**9)
        doomed = StreamController(crashing, QUIET, clock=self.clock)  # type: ignore[arg-type]
        self.run(doomed.start())
        crashing.left = self.crash_at
        self.crash_at = None
        try:
            self.run(coro_fn(doomed))
        except Crash:
            pass
        self.run(self._restart())

    def teardown(self) -> None:
        self.run(self.ctl.close())
        self.loop.close()

    # -- rules ------------------------------------------------------------------------------

    @rule(pick=st.integers(0, 100), size=st.integers(1, 40))
    def append(self, pick: int, size: int) -> None:
        segs = self.run(self.ctl.get_current_segments("s", "t"))
        s = segs[pick % len(segs)]
        self.run(self.store.append(name(s.id), b"a" * size))

    @rule(pick=st.integers(0, 100), merge=st.booleans(), parts=st.integers(2, 3))
    def scale(self, pick: int, merge: bool, parts: int) -> None:
        segs = self.run(self.ctl.get_current_segments("s", "t"))
        i = pick % len(segs)
        if merge and i + 1 < len(segs):
            a, b = segs[i], segs[i + 1]
            sealed, ranges = [a.id, b.id], [KeyRange(a.key_start, b.key_end)]
        else:
            s = segs[i]
            sealed, ranges = [s.id], split(s.key_start, s.key_end, parts)
        self.op(lambda c: c.scale("s", "t", sealed, ranges))

    @rule()
    def truncate_at_tail(self) -> None:
        tail = self.run(self.ctl.get_tail_cut("s", "t"))
        self.op(lambda c: c.truncate("s", "t", tail))
        if self.run(self.ctl.get_head_segments("s", "t")) == tail:
            self.committed.clear()  # truncated away

    @rule(commit=st.booleans(), scale_first=st.booleans())
    def transaction(self, commit: bool, scale_first: bool) -> None:
        txn = self.run(self.ctl.create_transaction("s", "t", lease_ms=600_000))
        self.payload += 1
        data = f"<txn{self.payload}>".encode()
        first = txn.segments[0].id
        self.run(
            self.store.append(self.ctl.transaction_segment_name("s", "t", first, txn.id), data)
        )
        if scale_first:
            segs = self.run(self.ctl.get_current_segments("s", "t"))
            s = segs[-1]
            self.run(self.ctl.scale("s", "t", [s.id], split(s.key_start, s.key_end, 2)))

        async def finish(c: StreamController) -> None:
            if commit:
                await c.commit_transaction("s", "t", txn.id)
            else:
                await c.abort_transaction("s", "t", txn.id)

        self.op(finish)
        state = self.run(self.ctl.get_transaction("s", "t", txn.id)).state
        if state == "OPEN":  # crashed before it was marked: finish it now
            self.run(finish(self.ctl))
            state = self.run(self.ctl.get_transaction("s", "t", txn.id)).state
        elif state == "COMMITTING":  # pragma: no cover - recovery commits marked ones
            raise AssertionError("a marked transaction survived recovery")
        assert state == ("COMMITTED" if commit else "ABORTED"), state
        if commit:
            self.committed.append(data)

    @rule(at=st.integers(0, 12))
    def crash_next_operation(self, at: int) -> None:
        self.crash_at = at

    @rule()
    def restart(self) -> None:
        self.run(self._restart())

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def consistent(self) -> None:
        self.run(self._check())

    async def _check(self) -> None:
        ctl = self.ctl
        meta = StreamMeta(ctl.md, "s", "t")
        assert (await meta.workflow()).value is None
        assert (await ctl.get_stream("s", "t")).state == StreamState.ACTIVE
        epochs = await ctl.get_epochs("s", "t")
        h = History(epochs)
        for e in epochs:
            assert is_cover([s.key_range for s in e.segments])
        head = await ctl.get_head_segments("s", "t")
        h.check_cut(head)
        gone = h.before(head)
        current = {s.id for s in epochs[-1].segments}
        everything = b""
        for seg in h.segments:
            try:
                props = await self.store.get_info(name(seg))
            except SegmentNotFoundError:
                assert seg in gone, seg
                continue
            assert seg not in gone, seg
            assert props.sealed == (seg not in current), seg
            if seg in head:
                assert props.start_offset == head[seg]
            r = await self.store.read(name(seg), props.start_offset, props.length)
            everything += b"".join(bytes(c) for c in r.chunks)
        # committed data not truncated away is there exactly once; aborted data never
        for data in self.committed:
            assert everything.count(data) == 1, data
        assert everything.count(b"<txn") == len(self.committed)


TestStreamMachine = StreamMachine.TestCase
TestStreamMachine.settings = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
