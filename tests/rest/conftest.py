"""The REST tests' server: the real app on a real uvicorn socket in the test's loop,
over ``StreamController`` and the in-memory segment store; httpx as the client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.admin.rest import RestLimits, create_app, serve_rest, stop_rest

from tests.conftest import free_port
from tests.rest.quiet import QUIET


@dataclass
class Rest:
    client: httpx.AsyncClient
    controller: StreamController
    store: InMemorySegmentStore
    ready: list[bool]


@pytest.fixture
async def rest() -> AsyncIterator[Rest]:
    store = InMemorySegmentStore()
    controller = StreamController(store, QUIET)
    await controller.start()
    ready = [True]
    app = create_app(
        controller,
        ready=lambda: ready[0],
        limits=RestLimits(segments_max=16, request_bytes_max=64 * 1024),
    )
    port = free_port()
    server, task = await serve_rest(app, "127.0.0.1", port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield Rest(client, controller, store, ready)
    finally:
        await stop_rest(server, task)
        await controller.close()
