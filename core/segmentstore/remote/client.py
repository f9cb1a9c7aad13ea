"""``RemoteSegmentStore``: the ``SegmentStore`` Protocol over one TCP connection to a
``SegmentStoreServer`` on another node.

Calls are pipelined: each writes its frame at once and waits for the answer with its
request id, so ``append_future`` keeps the local contract (queued in call order before it
returns). A lost connection fails every unanswered call with ``StoreShutdownError`` (the
caller retries, as for a container that is moving) and the next call reconnects.
``traffic`` cannot wait for the network: it answers the last figures fetched, refreshed
every ``traffic_refresh_ms`` for the segments asked about by a task that runs from
``start`` (or ``start_traffic_refresh``, which does not wait to connect) to ``close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tidegate.core.segmentstore.api import (
    AttributeUpdate,
    ReadResult,
    SegmentProperties,
    SegmentStoreError,
    SegmentTraffic,
    StoreShutdownError,
    TableEntry,
    TableRemoval,
    TableUpdate,
)
from tidegate.core.segmentstore.callbacks import DoneCallback, when_done
from tidegate.core.segmentstore.remote import codec
from tidegate.core.segmentstore.remote.codec import Op

log = logging.getLogger(__name__)

_ZERO = SegmentTraffic(0.0, 0.0)
#: Segments whose traffic was not asked for this long are no longer refreshed.
_TRAFFIC_INTEREST_S = 60.0


class _Link(asyncio.Protocol):
    """One connection: frames out, answers matched to their futures."""

    def __init__(self, frame_bytes_max: int) -> None:
        self.frame_bytes_max = frame_bytes_max
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        waiting, self.waiting = self.waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(StoreShutdownError("", f"connection to the segment store lost ({exc})"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= codec.LENGTH.size:
            (n,) = codec.LENGTH.unpack_from(self.buffer)
            if n > self.frame_bytes_max:
                self._abort(f"an answer of {n} bytes is over the bound of {self.frame_bytes_max}")
                return
            if len(self.buffer) < codec.LENGTH.size + n:
                break
            content = bytes(self.buffer[codec.LENGTH.size : codec.LENGTH.size + n])
            del self.buffer[: codec.LENGTH.size + n]
            try:
                request_id, status, body = codec.parse(content)
            except codec.ProtocolError as exc:
                self._abort(str(exc))
                return
            fut = self.waiting.pop(request_id, None)
            if fut is None or fut.done():
                continue
            if status == codec.OK:
                fut.set_result(body)
            else:
                try:
                    fut.set_exception(codec.error(body))
                except (TypeError, ValueError) as exc:
                    fut.set_exception(SegmentStoreError("", f"undecodable error answer: {exc}"))

    def _abort(self, why: str) -> None:
        log.warning("segment store connection closed: %s", why)
        if self.transport is not None:
            self.transport.abort()


class RemoteSegmentStore:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        connect_timeout_ms: int = 5000,
        request_timeout_ms: int = 30_000,
        frame_bytes_max: int = 64 * 1024 * 1024,
        traffic_refresh_ms: int = 1000,
    ) -> None:
        self.host = host
        self.port = port
        self.connect_timeout_ms = connect_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.frame_bytes_max = frame_bytes_max
        self.traffic_refresh_ms = traffic_refresh_ms
        self._link: _Link | None = None
        self._connecting: asyncio.Task[_Link] | None = None
        self._next_id = 0
        self._traffic: dict[str, SegmentTraffic] = {}
        self._traffic_asked: dict[str, float] = {}
        self._refresher: asyncio.Task[None] | None = None
        self._closed = False

    # -- connection --------------------------------------------------------------------

    async def start(self) -> None:
        await self._connected()
        self.start_traffic_refresh()

    def start_traffic_refresh(self) -> None:
        """Start refreshing ``traffic`` (once; connects on its first round). For owners
        that make the store where they cannot wait, such as ``PeerStores.store``."""
        if self._refresher is None and not self._closed:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_traffic())

    async def close(self) -> None:
        self._closed = True
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        link = self._link
        if link is not None and link.transport is not None:
            link.transport.close()
            await link.closed

    async def _connected(self) -> _Link:
        if self._closed:
            raise StoreShutdownError("", "the remote segment store is closed")
        link = self._link
        if link is not None and link.transport is not None:
            return link
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._connecting)

    async def _connect(self) -> _Link:
        loop = asyncio.get_running_loop()
        try:
            _, link = await asyncio.wait_for(
                loop.create_connection(lambda: _Link(self.frame_bytes_max), self.host, self.port),
                self.connect_timeout_ms / 1000,
            )
        except (TimeoutError, OSError) as exc:
            raise StoreShutdownError("", f"segment store at {self.host}:{self.port} unreachable: {exc}") from exc
        self._link = link
        return link

    def _send(self, link: _Link, op: Op, args: list[Any]) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if link.transport is None:
            fut.set_exception(StoreShutdownError("", "connection to the segment store lost"))
            return fut
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        link.waiting[self._next_id] = fut
        link.transport.write(codec.frame(self._next_id, op, args))
        return fut

    async def _call(self, op: Op, *args: Any, wait_ms: int = 0) -> Any:
        """Send one request and await its answer. A frozen peer keeps its socket open, so
        an answer not back within ``request_timeout_ms`` (plus ``wait_ms``, the server's
        own wait for a long-polling read) fails as an unreachable store, and the
        connection is dropped so the other requests on it fail too and the next reconnects."""
        link = await self._connected()
        timeout_ms = self.request_timeout_ms + wait_ms
        try:
            return await asyncio.wait_for(self._send(link, op, list(args)), timeout_ms / 1000)
        except TimeoutError:
            link._abort(f"no answer to {op.name} from {self.host}:{self.port} in {timeout_ms} ms")
            if self._link is link:
                self._link = None  # the next call connects afresh
            raise StoreShutdownError(
                "", f"segment store at {self.host}:{self.port} did not answer {op.name} "
                f"within {timeout_ms} ms"
            ) from None

    # -- segments ----------------------------------------------------------------------

    async def create_segment(self, name: str, attributes: Mapping[str, int] | None = None) -> None:
        await self._call(Op.CREATE_SEGMENT, name, dict(attributes or {}))

    async def append(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
    ) -> int:
        await self._connected()
        return int(
            await self.append_future(
                name, data, expected_offset=expected_offset,
                attribute_updates=attribute_updates, event_count=event_count,
            )  # fmt: skip
        )

    def append_future(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
        on_done: DoneCallback | None = None,
    ) -> asyncio.Future[int]:
        link = self._link
        if link is None or self._closed:
            fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            fut.set_exception(StoreShutdownError(name, "not connected to the segment store"))
            if not self._closed:  # the next call finds the connection made
                asyncio.ensure_future(self._reconnect_quietly())
        else:
            args = [
                name, bytes(data), expected_offset,
                codec.encode_attribute_updates(attribute_updates), event_count,
            ]  # fmt: skip
            fut = self._send(link, Op.APPEND, args)
        when_done(fut, on_done)
        return fut

    async def _reconnect_quietly(self) -> None:
        with contextlib.suppress(SegmentStoreError):
            await self._connected()

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        await self._call(Op.UPDATE_ATTRIBUTES, name, codec.encode_attribute_updates(updates))

    async def read(self, name: str, offset: int, max_length: int, timeout_ms: int = 0) -> ReadResult:
        return codec.read_result(
            await self._call(Op.READ, name, offset, max_length, timeout_ms, wait_ms=timeout_ms)
        )

    async def get_info(self, name: str) -> SegmentProperties:
        return codec.properties(await self._call(Op.GET_INFO, name))

    async def seal(self, name: str) -> int:
        return int(await self._call(Op.SEAL, name))

    async def truncate(self, name: str, offset: int) -> None:
        await self._call(Op.TRUNCATE, name, offset)

    async def merge(self, target: str, source: str) -> int:
        return int(await self._call(Op.MERGE, target, source))

    async def delete_segment(self, name: str) -> None:
        await self._call(Op.DELETE_SEGMENT, name)

    def traffic(self, name: str) -> SegmentTraffic:
        self._traffic_asked[name] = time.monotonic()
        return self._traffic.get(name, _ZERO)

    async def _refresh_traffic(self) -> None:
        while True:
            await asyncio.sleep(self.traffic_refresh_ms / 1000)
            cutoff = time.monotonic() - _TRAFFIC_INTEREST_S
            for name in [n for n, t in self._traffic_asked.items() if t < cutoff]:
                del self._traffic_asked[name]
                self._traffic.pop(name, None)
            names = list(self._traffic_asked)
            if not names:
                continue
            try:
                figures = await self._call(Op.TRAFFIC, names)
            except SegmentStoreError as exc:
                log.debug("traffic refresh failed: %s", exc)
                continue
            self._traffic.update((n, codec.traffic(f)) for n, f in zip(names, figures, strict=True))

    # -- table segments ----------------------------------------------------------------

    async def create_table(self, name: str) -> None:
        await self._call(Op.CREATE_TABLE, name)

    async def delete_table(self, name: str, must_be_empty: bool = False) -> None:
        await self._call(Op.DELETE_TABLE, name, must_be_empty)

    async def table_put(self, name: str, updates: Sequence[TableUpdate]) -> list[int]:
        return [int(v) for v in await self._call(Op.TABLE_PUT, name, codec.encode_table_updates(updates))]

    async def table_remove(self, name: str, removals: Sequence[TableRemoval]) -> None:
        await self._call(Op.TABLE_REMOVE, name, codec.encode_table_removals(removals))

    async def table_get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        return [codec.entry(e) for e in await self._call(Op.TABLE_GET, name, list(keys))]

    async def table_entries(self, name: str, prefix: bytes = b"") -> list[TableEntry]:
        found = [codec.entry(e) for e in await self._call(Op.TABLE_ENTRIES, name, prefix)]
        return [e for e in found if e is not None]
