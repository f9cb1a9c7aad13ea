"""An in-process gateway over the in-memory segment store and the real controller, and a
raw Kafka client that speaks frames encoded by kafka-python's message classes."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import tidegate.protocol  # noqa: F401  (loads kafka-python's schema modules, warning silenced)
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.app import Gateway
from tidegate.gateway.config import GatewayConfig


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation_id = 0

    @staticmethod
    async def connect(port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return RawClient(reader, writer)

    async def send(self, request: Any, version: int) -> int:
        self.correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation_id, client_id="raw")
        self.writer.write(bytes(request.encode(version=version, header=True, framed=True)))
        await self.writer.drain()
        return self.correlation_id

    async def recv(self, response_class: Any, version: int, timeout_s: float = 60) -> Any:
        async with asyncio.timeout(timeout_s):
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            body = await self.reader.readexactly(size)
        return response_class.decode(body, version=version, header=True)

    async def call(self, request: Any, version: int, response_class: Any) -> Any:
        await self.send(request, version)
        return await self.recv(response_class, version)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


class Node:
    """Store and controller survive ``restart``; the gateway (and its index) is rebuilt."""

    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.data_dir = data_dir
        self.config_values = config
        self.store = InMemorySegmentStore()
        self.controller = StreamController(self.store)
        self.gateway: Gateway | None = None
        self.port = 0

    async def start(self) -> None:
        await self.store.start()
        await self.controller.start()
        await self.start_gateway()

    async def start_gateway(self) -> None:
        config = GatewayConfig(data_dir=self.data_dir, listen="127.0.0.1:0", **self.config_values)
        self.gateway = Gateway(config, self.store, self.controller)
        _, self.port = await self.gateway.start()

    async def restart_gateway(self) -> None:
        assert self.gateway is not None
        await self.gateway.close()
        await self.start_gateway()

    async def client(self) -> RawClient:
        return await RawClient.connect(self.port)

    async def close(self) -> None:
        if self.gateway is not None:
            await self.gateway.close()
        await self.controller.close()
        await self.store.close()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "data")
    await n.start()
    try:
        yield n
    finally:
        await n.close()
