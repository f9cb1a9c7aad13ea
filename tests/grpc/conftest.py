"""The gRPC tests' server: ``start_grpc_server`` on a real port in the test's loop, over
``StreamController`` and the in-memory segment store; a real ``grpc.aio`` channel."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.admin.grpc_service import start_grpc_server
from tidegate.protocol.controller_grpc import pb2_grpc

from tests.conftest import free_port
from tests.rest.quiet import QUIET


@dataclass
class Grpc:
    stub: Any
    controller: StreamController
    store: InMemorySegmentStore
    port: int


@pytest.fixture
async def rpc() -> AsyncIterator[Grpc]:
    store = InMemorySegmentStore()
    controller = StreamController(store, QUIET)
    await controller.start()
    port = free_port()
    server = await start_grpc_server(controller, "127.0.0.1", port)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Grpc(pb2_grpc.ControllerServiceStub(channel), controller, store, port)
    finally:
        await server.stop(None)
        await controller.close()
