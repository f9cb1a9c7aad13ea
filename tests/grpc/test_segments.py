"""``SegmentService``: event appends by routing key, segment reads in whole events,
stream cuts with their text form, scaling under appends, transactions, refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.admin.grpc_segments import segment_service
from tidegate.gateway.admin.grpc_service import start_grpc_server
from tidegate.protocol import events, stream_cut
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.conftest import free_port
from tests.rest.quiet import QUIET


class Rpc:
    def __init__(self, channel: grpc.aio.Channel, store: InMemorySegmentStore) -> None:
        self.ctl = pb2_grpc.ControllerServiceStub(channel)
        self.seg = pb2_grpc.SegmentServiceStub(channel)
        self.store = store


@pytest.fixture
async def rpc() -> AsyncIterator[Rpc]:
    store = InMemorySegmentStore()
    controller = StreamController(store, QUIET)
    await controller.start()
    port = free_port()
    server = await start_grpc_server(
        controller, "127.0.0.1", port, services=[segment_service(controller, store, "kafka")])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            r = Rpc(channel, store)
            await r.ctl.CreateScope(pb2.ScopeRequest(scope="sc"))
            await r.ctl.CreateStream(pb2.CreateStreamRequest(
                scope="sc", stream="s", config=pb2.StreamConfig(scaling=pb2.ScalingPolicy(min_segments=2))))
            yield r
    finally:
        await server.stop(None)
        await controller.close()


async def _fails(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return str(info.value.details())


async def _append(r: Rpc, pairs: list[tuple[str, bytes]], txn: str = "") -> Any:
    return await r.seg.AppendEvents(pb2.AppendEventsRequest(
        scope="sc", stream="s", txn_id=txn,
        events=[pb2.Event(routing_key=k, data=d) for k, d in pairs]))


async def _read_all(r: Rpc, seg: int, offset: int = 0, max_bytes: int = 64) -> tuple[list[events.Event], bool]:
    out: list[events.Event] = []
    while True:
        page = await r.seg.ReadSegment(pb2.ReadSegmentRequest(
            scope="sc", stream="s", segment_id=seg, offset=offset, max_bytes=max_bytes))
        out += events.parse(page.data, page.offset)
        if page.end_of_segment or page.next_offset == offset:
            return out, page.end_of_segment
        offset = page.next_offset


async def test_append_then_read_in_pages_by_key(rpc: Rpc) -> None:
    pairs = [(f"k{i % 5}", f"event-{i}".encode()) for i in range(40)]
    appended = await _append(rpc, pairs)
    assert len(appended.positions) == 40
    tail = await rpc.seg.GetStreamCut(pb2.StreamCutRequest(scope="sc", stream="s", position=pb2.TAIL))
    assert sorted(tail.cut.cut) == [0, 1] and sum(tail.cut.cut.values()) > 0
    assert stream_cut.from_text(tail.text) == ("sc", "s", dict(tail.cut.cut))
    head = await rpc.seg.GetStreamCut(pb2.StreamCutRequest(scope="sc", stream="s", position=pb2.HEAD))
    assert dict(head.cut.cut) == {0: 0, 1: 0}
    got: dict[str, list[bytes]] = {}
    for seg in (0, 1):
        evs, ended = await _read_all(rpc, seg)  # pages smaller than 2 events
        assert not ended
        for e in evs:
            assert e.routing_key is not None
            got.setdefault(e.routing_key, []).append(e.data)
        assert [p.offset for p in appended.positions if p.segment_id == seg] == [e.offset for e in evs]
    for key in {k for k, _ in pairs}:
        assert got[key] == [d for k, d in pairs if k == key]  # each key in one segment, in order


async def test_a_scale_under_appends_and_sealed_end(rpc: Rpc) -> None:
    await _append(rpc, [("a", b"1"), ("b", b"2")])
    epoch = await rpc.ctl.Scale(pb2.ScaleRequest(
        scope="sc", stream="s", sealed_segments=[0, 1],
        new_ranges=[pb2.KeyRange(start=0, end=1)]))
    [merged] = [s.id for s in epoch.segments]
    later = await _append(rpc, [("a", b"3"), ("b", b"4")])
    assert {p.segment_id for p in later.positions} == {merged}
    for seg in (0, 1):
        info = await rpc.seg.GetSegmentInfo(pb2.SegmentInfoRequest(scope="sc", stream="s", segment_id=seg))
        assert info.sealed
        _evs, ended = await _read_all(rpc, seg)
        assert ended
    evs, ended = await _read_all(rpc, merged)
    assert [e.data for e in evs] == [b"3", b"4"] and not ended


async def test_large_event_comes_alone_and_limits(rpc: Rpc) -> None:
    big = b"x" * (events.EVENT_BYTES_MAX - 100)
    pos = (await _append(rpc, [("same", big), ("same", b"small")])).positions
    page = await rpc.seg.ReadSegment(pb2.ReadSegmentRequest(
        scope="sc", stream="s", segment_id=pos[0].segment_id, offset=0, max_bytes=10))
    [e] = events.parse(page.data, 0)
    assert e.data == big and page.next_offset == pos[1].offset
    too_big = b"x" * (events.EVENT_BYTES_MAX + 1)
    await _fails(_append(rpc, [("k", too_big)]), grpc.StatusCode.INVALID_ARGUMENT)


async def test_refusals(rpc: Rpc) -> None:
    await _append(rpc, [("a", b"1")])
    read = pb2.ReadSegmentRequest
    await _fails(rpc.seg.ReadSegment(read(scope="sc", stream="s", segment_id=0, offset=10_000, max_bytes=9)),
                 grpc.StatusCode.OUT_OF_RANGE)
    await _fails(rpc.seg.ReadSegment(read(scope="sc", stream="s", segment_id=77, offset=0, max_bytes=9)),
                 grpc.StatusCode.NOT_FOUND)
    await _fails(rpc.seg.ReadSegment(read(scope="sc", stream="s", segment_id=0, offset=0, max_bytes=0)),
                 grpc.StatusCode.INVALID_ARGUMENT)
    await _fails(rpc.seg.ReadSegment(read(scope="kafka", stream="t", segment_id=0, offset=0, max_bytes=9)),
                 grpc.StatusCode.INVALID_ARGUMENT)
    await _fails(rpc.seg.AppendEvents(pb2.AppendEventsRequest(scope="sc", stream="nope")),
                 grpc.StatusCode.NOT_FOUND)
    await rpc.ctl.CreateStream(pb2.CreateStreamRequest(scope="sc", stream="sealed"))
    await rpc.ctl.SealStream(pb2.StreamRequest(scope="sc", stream="sealed"))
    assert "is sealed" in await _fails(rpc.seg.AppendEvents(pb2.AppendEventsRequest(
        scope="sc", stream="sealed", events=[pb2.Event(data=b"x")])), grpc.StatusCode.FAILED_PRECONDITION)
    second = (await _append(rpc, [("a", b"2")])).positions[0]
    await rpc.store.truncate(f"sc/s/{second.segment_id}.#epoch.0", second.offset)
    await _fails(rpc.seg.ReadSegment(read(scope="sc", stream="s", segment_id=second.segment_id, offset=0,
                                          max_bytes=9)), grpc.StatusCode.OUT_OF_RANGE)


async def test_events_in_a_transaction_appear_at_commit(rpc: Rpc) -> None:
    txn = await rpc.ctl.CreateTransaction(pb2.CreateTransactionRequest(scope="sc", stream="s"))
    await _append(rpc, [("a", b"t1"), ("a", b"t2")], txn=txn.id)
    tail = await rpc.seg.GetStreamCut(pb2.StreamCutRequest(scope="sc", stream="s", position=pb2.TAIL))
    assert sum(tail.cut.cut.values()) == 0
    await rpc.ctl.CommitTransaction(pb2.TransactionRequest(scope="sc", stream="s", id=txn.id))
    found = [e.data for seg in (0, 1) for e in (await _read_all(rpc, seg))[0]]
    assert found == [b"t1", b"t2"]
    await _fails(_append(rpc, [("a", b"late")], txn=txn.id), grpc.StatusCode.INVALID_ARGUMENT)


async def test_appends_racing_scales_keep_every_key_in_order(rpc: Rpc) -> None:
    import asyncio

    keys = [f"key{i}" for i in range(10)]

    async def writer() -> None:
        for i in range(30):
            await _append(rpc, [(k, f"{i}".encode()) for k in keys])

    async def scaler() -> None:
        for round_ in range(6):
            current = sorted((await rpc.ctl.GetCurrentSegments(pb2.StreamRequest(scope="sc", stream="s"))).segments,
                             key=lambda s: s.key_start)
            if round_ % 2 == 0:
                w = max(current, key=lambda s: s.key_end - s.key_start)
                mid = (w.key_start + w.key_end) / 2
                ranges = [pb2.KeyRange(start=w.key_start, end=mid), pb2.KeyRange(start=mid, end=w.key_end)]
                await rpc.ctl.Scale(pb2.ScaleRequest(scope="sc", stream="s", sealed_segments=[w.id], new_ranges=ranges))
            else:
                a, b = current[0], current[1]
                await rpc.ctl.Scale(pb2.ScaleRequest(scope="sc", stream="s", sealed_segments=[a.id, b.id],
                                                     new_ranges=[pb2.KeyRange(start=a.key_start, end=b.key_end)]))
            await asyncio.sleep(0.005)

    await asyncio.gather(writer(), scaler())
    epochs = (await rpc.ctl.GetEpochs(pb2.StreamRequest(scope="sc", stream="s"))).epochs
    seen: list[tuple[int, int, str | None, bytes]] = []
    for seg_id in sorted({s.id for e in epochs for s in e.segments}):
        for e in (await _read_all(rpc, seg_id, max_bytes=4096))[0]:
            seen.append((seg_id >> 32, e.offset, e.routing_key, e.data))
    seen.sort()
    for k in keys:
        assert [d for _ep, _o, key, d in seen if key == k] == [f"{i}".encode() for i in range(30)], k
