"""Closed connections are freed by reference counting alone: the server runs with
``gc.freeze()`` and full collections rarely come, so a reference cycle through a
closed connection (a stored exception's traceback, a future's) keeps its buffers
alive (issue 22, finding 2). A connection reset with requests queued also closes their
handlers' coroutines, never awaited otherwise (finding 10)."""

from __future__ import annotations

import asyncio
import gc
import struct
import weakref
from collections.abc import Awaitable, Callable, Iterator

import pytest

from tests.gateway.conftest import Node

Closer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _api_versions_v0(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)  # v0 has an empty body
    return struct.pack(">i", len(body)) + body


async def _eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(_api_versions_v0(1))
    await reader.readexactly(4)
    writer.close()


async def _reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(_api_versions_v0(1) * 20)
    writer.transport.abort()


async def _oversized(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(struct.pack(">i", 2**31 - 1) + b"x" * 10)
    await reader.read()  # the server closes
    writer.close()


async def _garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(struct.pack(">i", 12) + struct.pack(">hhih", 999, 0, 1, -1) + b"xx")
    await reader.read()
    writer.close()


async def _partial(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(struct.pack(">i", 1_000_000) + b"y" * 300_000)  # a large frame, cut
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()


@pytest.mark.parametrize("closer", [_eof, _reset, _oversized, _garbage, _partial])
async def test_closed_connection_is_freed_without_gc(
    node: Node, no_gc: None, closer: Closer
) -> None:
    server = node.gateway.server  # type: ignore[union-attr]
    assert server is not None
    refs: list[weakref.ref[object]] = []
    for _ in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        for _ in range(100):
            if server._connections:
                break
            await asyncio.sleep(0.01)
        conn, task = next(iter(server._connections.items()))
        refs += [weakref.ref(conn), weakref.ref(conn._wire)]
        del conn, task
        await closer(reader, writer)
        for _ in range(200):
            if not server._connections:
                break
            await asyncio.sleep(0.01)
        assert not server._connections
        del reader, writer
    for _ in range(5):
        await asyncio.sleep(0.01)  # callbacks scheduled by the close run
    alive = [r() for r in refs if r() is not None]
    held = [type(o).__name__ for o in alive]
    assert not alive, f"still referenced: {held}"
