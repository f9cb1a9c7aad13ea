"""Property tests of StreamCut arithmetic and truncation: cuts built the way a reader
moves (reading further into a segment, or moving from a fully read group of segments to
their successors) are valid, ordered, their byte distances add up, and truncating along
them works forwards and is refused backwards."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tidegate.core.controller.api import (
    ConflictError,
    KeyRange,
    ScalingPolicy,
    StreamConfig,
    qualified_segment_name,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.api import SegmentNotFoundError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import QUIET, Clock


def name(seg: int) -> str:
    return qualified_segment_name("s", "t", seg)


async def length(store: InMemorySegmentStore, seg: int) -> int:
    return (await store.get_info(name(seg))).length


async def advance(
    ctl: StreamController, store: InMemorySegmentStore, cut: dict[int, int], draw: st.DataObject
) -> dict[int, int]:
    """One reader step from ``cut``: read further in one segment, or move past a group of
    fully read sealed segments to their successors."""
    out = dict(cut)
    seg = draw.draw(st.sampled_from(sorted(out)))
    end = await length(store, seg)
    succ = await ctl.get_successors("s", "t", seg)
    if succ and out[seg] == end:
        # the segments sealed together with ``seg`` and their successors (closed over)
        group, nxt = {seg}, {x.id for x in succ}
        while True:
            preds = set()
            for x in nxt:
                preds |= {p.id for p in await ctl.get_predecessors("s", "t", x)}
            more = set()
            for p in preds:
                more |= {x.id for x in await ctl.get_successors("s", "t", p)}
            if preds == group and more == nxt:
                break
            group, nxt = preds, more
        full = [p in out and out[p] == await length(store, p) for p in group]
        if all(full):
            for p in group:
                del out[p]
            for x in nxt:
                out[x] = 0
            return out
    out[seg] = draw.draw(st.one_of(st.just(end), st.integers(out[seg], end)))
    return out


async def scenario(steps: list[tuple[int, int]], data: st.DataObject) -> None:
    store = InMemorySegmentStore()
    ctl = StreamController(store, QUIET, clock=Clock())
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=2)))
    for pick, size in steps:
        segs = await ctl.get_current_segments("s", "t")
        for s in segs:
            await store.append(name(s.id), b"x" * (size + s.number % 3))
        s = segs[pick % len(segs)]
        if pick % 2 and len(segs) > 1 and s is not segs[-1]:
            n = segs[segs.index(s) + 1]
            await ctl.scale("s", "t", [s.id, n.id], [KeyRange(s.key_start, n.key_end)])
        else:
            mid = s.key_start + (s.key_end - s.key_start) / 2
            await ctl.scale(
                "s", "t", [s.id], [KeyRange(s.key_start, mid), KeyRange(mid, s.key_end)]
            )
    head = await ctl.get_head_segments("s", "t")
    cuts = [head]
    for _ in range(3):
        c = cuts[-1]
        for _ in range(data.draw(st.integers(0, 8))):
            c = await advance(ctl, store, c, data)
        cuts.append(c)
    c0, c1, c2, c3 = cuts
    for a in cuts:
        assert await ctl.bytes_between("s", "t", a, a) == 0
    for i, a in enumerate(cuts):
        for b in cuts[: i + 1]:
            assert await ctl.is_cut_ge("s", "t", a, b)
            if a != b:
                assert not await ctl.is_cut_ge("s", "t", b, a)
    d = [await ctl.bytes_between("s", "t", cuts[i + 1], cuts[i]) for i in range(3)]
    assert await ctl.bytes_between("s", "t", c3, c0) == sum(d)
    assert await ctl.bytes_between("s", "t", c2, c0) == d[0] + d[1]
    if c1 != c0:
        with pytest.raises(ConflictError):
            await ctl.bytes_between("s", "t", c0, c1)
    # truncate along the chain
    await ctl.truncate("s", "t", c1)
    await ctl.truncate("s", "t", c2)
    if c1 != c2:
        with pytest.raises(ConflictError):
            await ctl.truncate("s", "t", c1)
    assert await ctl.get_head_segments("s", "t") == c2
    for seg, offset in c2.items():
        assert (await store.get_info(name(seg))).start_offset == offset
    epochs = await ctl.get_epochs("s", "t")
    alive = 0
    for seg in {s.id for e in epochs for s in e.segments}:
        try:
            await store.get_info(name(seg))
            alive += 1
        except SegmentNotFoundError:
            # deleted segments lie wholly before the head
            assert seg not in c2
            assert await ctl.is_cut_ge("s", "t", c2, c2)
    assert alive >= len(c2)
    await ctl.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 50)), min_size=1, max_size=6),
    data=st.data(),
)
def test_reader_cuts(steps: list[tuple[int, int]], data: st.DataObject) -> None:
    asyncio.run(scenario(steps, data))
