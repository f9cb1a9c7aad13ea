"""``RemoteSegmentStore`` against a ``SegmentStoreServer`` over loopback TCP, serving a
real ``StreamSegmentStore``: the store API's own tests run through the wire unchanged,
then what only the network adds (lost connections, hostile frames, bounds)."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tidegate.core.cluster.routing import PeerStores
from tidegate.core.segmentstore.api import (
    BadKeyVersionError,
    BadOffsetError,
    ContainerNotOwnedError,
    SegmentNotFoundError,
    StoreShutdownError,
    TableUpdate,
)
from tidegate.core.segmentstore.remote.client import RemoteSegmentStore
from tidegate.core.segmentstore.remote.server import SegmentStoreServer
from tidegate.core.segmentstore.service import StreamSegmentStore, container_of

from tests.segmentstore.helpers import Backings
from tests.segmentstore.test_store_api import (  # noqa: F401 - run here over the wire
    test_append_buffer_kinds,
    test_append_read_info,
    test_attributes_with_append_are_atomic,
    test_concurrent_appends_keep_call_order,
    test_rejected_append_does_not_affect_earlier_ones,
    test_tables,
    test_tail_read_waits_for_data,
)


@pytest.fixture
async def local(backings: Backings, tmp_path: Path) -> AsyncIterator[StreamSegmentStore]:
    s = backings.store(tmp_path)
    await s.start()
    yield s
    await s.close()


@pytest.fixture
async def server(local: StreamSegmentStore) -> AsyncIterator[tuple[SegmentStoreServer, int]]:
    srv = SegmentStoreServer(local, frame_bytes_max=1 << 20, pending_bytes_max=1 << 20)
    _, port = await srv.start("127.0.0.1", 0)
    yield srv, port
    await srv.close()


@pytest.fixture
async def store(server: tuple[SegmentStoreServer, int]) -> AsyncIterator[RemoteSegmentStore]:
    client = RemoteSegmentStore("127.0.0.1", server[1], traffic_refresh_ms=50)
    await client.start()
    yield client
    await client.close()


async def test_errors_keep_their_class_and_fields(store: RemoteSegmentStore) -> None:
    await store.create_segment("s")
    await store.append("s", b"abc")
    with pytest.raises(BadOffsetError) as bad:
        await store.append("s", b"x", expected_offset=1)
    assert bad.value.actual == 3 and bad.value.segment == "s"
    with pytest.raises(SegmentNotFoundError, match="nope"):
        await store.get_info("nope")
    await store.create_table("t")
    await store.table_put("t", [TableUpdate(b"k", b"v")])
    with pytest.raises(BadKeyVersionError) as stale:
        await store.table_put("t", [TableUpdate(b"k", b"w", expected_version=99)])
    assert stale.value.key == b"k"


async def test_container_not_owned_reaches_the_caller(backings: Backings, tmp_path: Path) -> None:
    local = backings.store(tmp_path, owned_containers=(0,))
    await local.start()
    srv = SegmentStoreServer(local)
    _, port = await srv.start("127.0.0.1", 0)
    client = RemoteSegmentStore("127.0.0.1", port)
    await client.start()
    try:
        foreign = next(n for n in (f"n{i}" for i in range(100)) if container_of(n, 2) == 1)
        with pytest.raises(ContainerNotOwnedError):
            await client.create_segment(foreign)
    finally:
        await client.close()
        await srv.close()
        await local.close()


async def test_append_futures_keep_call_order(store: RemoteSegmentStore) -> None:
    await store.create_segment("s")
    futures = [store.append_future("s", bytes([i]) * (i + 1)) for i in range(40)]
    offsets = await asyncio.gather(*futures)
    assert list(offsets) == [sum(range(1, i + 1)) for i in range(40)]


async def test_traffic_is_refreshed_for_segments_asked_about(
    store: RemoteSegmentStore, local: StreamSegmentStore
) -> None:
    await store.create_segment("hot")
    for _ in range(20):
        await store.append("hot", b"x" * 1000)
    store.traffic("hot")
    for _ in range(100):
        await asyncio.sleep(0.05)
        if store.traffic("hot").bytes_per_second:
            break
    remote, here = store.traffic("hot"), local.traffic("hot")
    assert here.bytes_per_second > 0
    assert remote.bytes_per_second == pytest.approx(here.bytes_per_second, rel=0.2)


async def test_lost_connection_fails_calls_then_reconnects(
    store: RemoteSegmentStore, server: tuple[SegmentStoreServer, int]
) -> None:
    await store.create_segment("s")
    waiting = asyncio.ensure_future(store.read("s", 0, 10, timeout_ms=10_000))
    await asyncio.sleep(0.05)
    for conn in list(server[0].connections):
        assert conn.transport is not None
        conn.transport.abort()
    with pytest.raises(StoreShutdownError, match="lost"):
        await waiting
    assert await store.append("s", b"again") == 0  # a new connection
    assert (await store.get_info("s")).length == 5


async def test_unreachable_server_is_a_retriable_error() -> None:
    client = RemoteSegmentStore("127.0.0.1", 1, connect_timeout_ms=500)
    with pytest.raises(StoreShutdownError, match="unreachable"):
        await client.get_info("s")
    with pytest.raises(StoreShutdownError):
        await client.append_future("s", b"x")
    await client.close()


async def test_a_peer_that_never_answers_fails_calls_after_the_request_timeout() -> None:
    """A frozen node (SIGSTOP) keeps its socket open and the kernel still accepts
    connections to it: calls fail as an unreachable store after ``request_timeout_ms``
    (plus a long-polling read's own wait) instead of waiting forever (a restarted node's
    index rebuild hung on such a read in the fault campaign)."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)

    frozen = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = frozen.sockets[0].getsockname()[1]
    client = RemoteSegmentStore("127.0.0.1", port, request_timeout_ms=300)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(StoreShutdownError, match="did not answer GET_INFO within 300 ms"):
            await client.get_info("s")
        assert loop.time() - started < 30
        started = loop.time()
        with pytest.raises(StoreShutdownError, match="did not answer READ within 500 ms"):
            await client.read("s", 0, 10, timeout_ms=200)
        assert loop.time() - started >= 0.45
    finally:
        await client.close()
        for w in accepted:
            w.close()
        frozen.close()
        await frozen.wait_closed()


async def test_hostile_frames_close_only_their_connection(
    store: RemoteSegmentStore, server: tuple[SegmentStoreServer, int]
) -> None:
    await store.create_segment("s")
    port = server[1]
    frames = [
        struct.pack(">I", 1 << 30),  # over the frame bound: closed before any body arrives
        struct.pack(">I", 3) + b"abc",  # shorter than a header
        struct.pack(">IIB", 5 + 4, 1, 99) + b"\x93\x01\x02\x03",  # unknown operation
        struct.pack(">IIB", 5 + 3, 1, 2) + b"\xc1\xc1\xc1",  # undecodable body
        struct.pack(">IIB", 5 + 1, 1, 2) + b"\x90",  # an append without arguments
        os.urandom(64),
    ]
    for bad in frames:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(bad)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        writer.close()
    assert await store.append("s", b"still served") == 0


async def test_merge_over_the_wire(store: RemoteSegmentStore) -> None:
    names = [f"seg{i}" for i in range(40)]
    target, source = [n for n in names if container_of(n, 2) == container_of(names[0], 2)][:2]
    await store.create_segment(target)
    await store.create_segment(source)
    await store.append(target, b"T" * 10)
    await store.append(source, b"S" * 5)
    assert await store.merge(target, source) == 10
    with pytest.raises(SegmentNotFoundError):
        await store.get_info(source)
    r = await store.read(target, 0, 100)
    assert b"".join(bytes(c) for c in r.chunks) == b"T" * 10 + b"S" * 5


async def test_more_in_flight_than_the_server_buffers(store: RemoteSegmentStore) -> None:
    """Twelve times the server's pending-bytes bound sent at once: it stops reading,
    answers, reads on; every append lands, in order."""
    await store.create_segment("s")
    chunk = 64 * 1024
    futures = [store.append_future("s", bytes([i % 256]) * chunk) for i in range(200)]
    assert list(await asyncio.gather(*futures)) == [i * chunk for i in range(200)]
    assert (await store.get_info("s")).length == 200 * chunk


async def test_peer_stores_refresh_traffic_from_the_first_call_to_close(
    server: tuple[SegmentStoreServer, int], local: StreamSegmentStore
) -> None:
    """The stores cluster mode makes for other nodes (``PeerStores.store``, never
    ``start``ed) report their segments' traffic: the controller leader's auto-scaler
    reads the rates of segments other nodes own through them. Their refresh ends with
    ``close`` (no task left behind)."""
    await local.create_segment("hot")
    for _ in range(20):
        await local.append("hot", b"x" * 1000)
    peers = PeerStores(traffic_refresh_ms=50)
    peers.update({2: ("127.0.0.1", server[1])})
    peer = peers.store(2)
    peer.traffic("hot")
    for _ in range(100):
        await asyncio.sleep(0.05)
        if peer.traffic("hot").bytes_per_second:
            break
    assert peer.traffic("hot").bytes_per_second > 0, "the peer's traffic was never refreshed"
    before = asyncio.all_tasks()
    assert any(getattr(t.get_coro(), "__qualname__", "").endswith("._refresh_traffic") for t in before)
    await peers.close()
    await asyncio.sleep(0)
    left = [
        t for t in before
        if not t.done() and getattr(t.get_coro(), "__qualname__", "").endswith("._refresh_traffic")
    ]
    assert not left, left
