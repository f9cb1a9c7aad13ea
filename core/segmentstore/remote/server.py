"""``SegmentStoreServer``: serves a node's local ``SegmentStore`` to the other nodes.

Each connection reads frames (``codec``) and answers them as they complete. Appends are
handed to the store as their frames arrive (``append_future``, queued in call order before
it returns), so a connection's appends are applied in the order they were sent; every
other request runs as its own task, as concurrent local callers would. A connection stops
reading while the bytes of its unanswered requests exceed ``pending_bytes_max``, and a
frame over ``frame_bytes_max`` closes it: memory follows what peers send, within bounds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tidegate.core.segmentstore.api import SegmentStore, SegmentStoreError
from tidegate.core.segmentstore.remote import codec
from tidegate.core.segmentstore.remote.codec import Op

log = logging.getLogger(__name__)

Handler = Callable[[SegmentStore, list[Any]], Awaitable[Any]]


async def _read(s: SegmentStore, a: list[Any]) -> Any:
    return codec.encode_read(await s.read(a[0], int(a[1]), int(a[2]), int(a[3])))


async def _info(s: SegmentStore, a: list[Any]) -> Any:
    return codec.encode_properties(await s.get_info(a[0]))


async def _traffic(s: SegmentStore, a: list[Any]) -> Any:
    return [codec.encode_traffic(s.traffic(name)) for name in a[0]]


async def _table_get(s: SegmentStore, a: list[Any]) -> Any:
    return [codec.encode_entry(e) for e in await s.table_get(a[0], [bytes(k) for k in a[1]])]


async def _table_entries(s: SegmentStore, a: list[Any]) -> Any:
    return [codec.encode_entry(e) for e in await s.table_entries(a[0], bytes(a[1]))]


HANDLERS: dict[int, Handler] = {
    Op.CREATE_SEGMENT: lambda s, a: s.create_segment(a[0], a[1]),
    Op.UPDATE_ATTRIBUTES: lambda s, a: s.update_attributes(a[0], codec.attribute_updates(a[1])),
    Op.READ: _read,
    Op.GET_INFO: _info,
    Op.SEAL: lambda s, a: s.seal(a[0]),
    Op.TRUNCATE: lambda s, a: s.truncate(a[0], int(a[1])),
    Op.MERGE: lambda s, a: s.merge(a[0], a[1]),
    Op.DELETE_SEGMENT: lambda s, a: s.delete_segment(a[0]),
    Op.TRAFFIC: _traffic,
    Op.CREATE_TABLE: lambda s, a: s.create_table(a[0]),
    Op.DELETE_TABLE: lambda s, a: s.delete_table(a[0], bool(a[1])),
    Op.TABLE_PUT: lambda s, a: s.table_put(a[0], codec.table_updates(a[1])),
    Op.TABLE_REMOVE: lambda s, a: s.table_remove(a[0], codec.table_removals(a[1])),
    Op.TABLE_GET: _table_get,
    Op.TABLE_ENTRIES: _table_entries,
}


class _Connection(asyncio.Protocol):
    def __init__(self, server: SegmentStoreServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.pending_bytes = 0
        self.paused = False
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.server.connections.discard(self)
        for task in self.tasks:
            task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= codec.LENGTH.size:
            (n,) = codec.LENGTH.unpack_from(self.buffer)
            if n > self.server.frame_bytes_max:
                self._close(f"a frame of {n} bytes is over the bound of {self.server.frame_bytes_max}")
                return
            if len(self.buffer) < codec.LENGTH.size + n:
                break
            content = bytes(self.buffer[codec.LENGTH.size : codec.LENGTH.size + n])
            del self.buffer[: codec.LENGTH.size + n]
            try:
                self._request(*codec.parse(content), size=n)
            except (codec.ProtocolError, ValueError, TypeError, IndexError, KeyError) as exc:
                self._close(f"a malformed request: {exc}")
                return

    def _request(self, request_id: int, code: int, args: Any, *, size: int) -> None:
        if not isinstance(args, list):
            raise codec.ProtocolError("arguments are not an array")
        self._charge(size)
        store = self.server.store
        if code == Op.APPEND:
            name, data, expected, updates, events = args
            if not (isinstance(name, str) and isinstance(data, bytes)):
                raise codec.ProtocolError("an append names a segment (str) and carries bytes")
            if not (expected is None or isinstance(expected, int)) or not isinstance(events, int):
                raise codec.ProtocolError("an append's expected offset and event count are ints")
            updates = codec.attribute_updates(updates)

            def start_append() -> None:
                fut = store.append_future(
                    name, data, expected_offset=expected, attribute_updates=updates,
                    event_count=events,
                )  # fmt: skip
                fut.add_done_callback(lambda f: self._answer_future(request_id, f, size))

            # Scheduled, not called: other requests' tasks take their first step (where
            # the store queues them) in arrival order, and an append must not overtake them.
            asyncio.get_running_loop().call_soon(start_append)
            return
        handler = HANDLERS.get(code)
        if handler is None:
            raise codec.ProtocolError(f"unknown operation {code}")
        task = asyncio.ensure_future(self._run(request_id, handler(store, args), size))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, request_id: int, call: Awaitable[Any], size: int) -> None:
        try:
            result = await call
        except SegmentStoreError as exc:
            self._send(request_id, codec.ERROR, codec.encode_error(exc), size)
        except Exception as exc:  # noqa: BLE001 - a bug must not end the connection
            log.exception("segment store request %d failed", request_id)
            self._send(request_id, codec.ERROR, codec.encode_error(SegmentStoreError("", repr(exc))), size)
        else:
            self._send(request_id, codec.OK, result, size)

    def _answer_future(self, request_id: int, fut: asyncio.Future[int], size: int) -> None:
        if fut.cancelled():
            self._send(request_id, codec.ERROR, codec.encode_error(SegmentStoreError("", "cancelled")), size)
            return
        exc = fut.exception()
        if exc is None:
            self._send(request_id, codec.OK, fut.result(), size)
        elif isinstance(exc, SegmentStoreError):
            self._send(request_id, codec.ERROR, codec.encode_error(exc), size)
        else:
            self._send(request_id, codec.ERROR, codec.encode_error(SegmentStoreError("", repr(exc))), size)

    def _send(self, request_id: int, status: int, body: Any, size: int) -> None:
        self.pending_bytes -= size
        if self.transport is None:
            return
        self.transport.write(codec.frame(request_id, status, body))
        if self.paused and self.pending_bytes <= self.server.pending_bytes_max // 2:
            self.paused = False
            self.transport.resume_reading()

    def _charge(self, size: int) -> None:
        self.pending_bytes += size
        if not self.paused and self.pending_bytes > self.server.pending_bytes_max:
            assert self.transport is not None
            self.paused = True
            self.transport.pause_reading()

    def _close(self, why: str) -> None:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        log.warning("segment store connection from %s closed: %s", peer, why)
        if self.transport is not None:
            self.transport.close()


class SegmentStoreServer:
    def __init__(
        self,
        store: SegmentStore,
        *,
        frame_bytes_max: int = 8 * 1024 * 1024 + codec.FRAME_OVERHEAD_BYTES_MAX,
        pending_bytes_max: int = 64 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.frame_bytes_max = frame_bytes_max
        self.pending_bytes_max = pending_bytes_max
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port)
        address = self._server.sockets[0].getsockname()
        return str(address[0]), int(address[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
