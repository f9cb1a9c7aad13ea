"""The plog server: ``PlogStore`` over TCP (``wire.py``), registered in ZooKeeper.

Each connection reads whole frames (``transport.py``: received into buffers, dispatched
as they arrive) and answers each request once; appends are answered when durable, out
of order with other requests (the request id pairs them). A frame that cannot be parsed
closes its connection. Per connection, the bytes of appends not yet answered are
bounded: past ``conn_append_bytes_max`` the server stops reading that connection until
some are answered; other requests run concurrently, at most ``conn_requests_max`` at a
time; and reading stops while answers the client has not read pile up.

Registration: an ephemeral node ``<root>/servers/<server id>`` holding
``{"host": H, "port": P}``; clients find live servers there. The server id is given,
or made once and kept in ``<data dir>/server-id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from tidegate.core.cluster.zookeeper import ZooKeeper
from tidegate.core.plog.store import PlogStore
from tidegate.core.plog.sweep import OrphanSweep
from tidegate.core.plog.transport import BufferPool, FrameProtocol
from tidegate.core.plog.wire import (
    FRAME_BYTES_MAX,
    INFO,
    READ_BYTES_MAX,
    U64,
    U64U32,
    U64U64,
    Op,
    Status,
    WireError,
    frame,
    unpack,
    unpack_id,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ROOT = "/tidegate/plog"


def server_id_of(data_dir: Path, given: str | None) -> str:
    path = data_dir / "server-id"
    if given:
        return given
    if path.exists():
        return path.read_text().strip()
    sid = uuid.uuid4().hex[:12]
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(sid + "\n")
    return sid


class PlogServer:
    def __init__(
        self,
        data_dir: Path,
        host: str,
        port: int,
        *,
        zookeeper: str | None = None,
        root: str = DEFAULT_ROOT,
        server_id: str | None = None,
        conn_append_bytes_max: int = 64 * 1024 * 1024,
        conn_requests_max: int = 64,
        disk_bytes_max: int | None = None,
        sweep_interval_ms: int = 300_000,
    ) -> None:
        """``sweep_interval_ms``: how often, registered in ZooKeeper, it deletes the plogs
        no log records any more (``sweep.py``; also once at start; 0: at start only)."""
        self.data_dir = Path(data_dir)
        self.host, self.port = host, port
        self.store = PlogStore(self.data_dir, disk_bytes_max=disk_bytes_max)
        self.server_id = server_id_of(self.data_dir, server_id)
        self._zk_hosts = zookeeper
        self._root = root
        self.zk: ZooKeeper | None = None
        self._conn_append_bytes_max = conn_append_bytes_max
        self._conn_requests_max = conn_requests_max
        self._server: asyncio.Server | None = None
        self._conns: set[_Connection] = set()
        #: Large append frames are received into these, given back once answered.
        self.pool = BufferPool()
        self._sweep_interval_ms = sweep_interval_ms
        self.sweep: OrphanSweep | None = None
        self._sweep_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.store.open()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self).protocol, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self._zk_hosts:
            self.zk = ZooKeeper(self._zk_hosts)
            await self.zk.start()
            info = json.dumps({"host": self.host, "port": self.port}).encode()
            await self.zk.register(f"{self._root}/servers/{self.server_id}", info)
            self.sweep = OrphanSweep(self.store, self.zk, self._root, interval_ms=self._sweep_interval_ms)
            self._sweep_task = asyncio.ensure_future(self.sweep.run())

    async def close(self) -> None:
        if self._sweep_task is not None:
            self._sweep_task.cancel()
            with contextlib.suppress(BaseException):
                await self._sweep_task
        if self._server is not None:
            self._server.close()
        conns = list(self._conns)
        for c in conns:
            c.protocol.close()
        if conns:
            await asyncio.wait([c.closed for c in conns], timeout=5)
        if self.zk is not None:
            await self.zk.stop()
        await self.store.close()


class PlogServerThread:
    """A node's embedded ``PlogServer`` on a thread and event loop of its own: a long
    step of the node's loop (an index rebuild, a large request) then never leaves other
    nodes' Tier-1 writes unanswered until they give this server up (``timeout_ms``)."""

    def __init__(self, server: PlogServer) -> None:
        self.server = server
        self.server_id = server.server_id
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=f"plog-server-{self.server_id}",
                                  daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            await self._call(self.server.start())
        except BaseException:
            # ZooKeeper not there yet: nothing is left open, and a later start tries again.
            with contextlib.suppress(Exception):
                await self._call(self.server.close())
            await self._stop_loop()
            raise

    async def close(self) -> None:
        if self._loop is None:
            return
        try:
            await self._call(self.server.close())
        finally:
            await self._stop_loop()

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            await self._call(_finish_loop())
        self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()


async def _finish_loop() -> None:
    """Cancel what is left on this loop and stop its worker threads, before it stops."""
    current = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not current]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
    loop = asyncio.get_running_loop()
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()


class _Connection:
    """One client's connection: frames dispatched as they arrive (``transport.py``)."""

    def __init__(self, server: PlogServer) -> None:
        self.server = server
        self.store = server.store
        self.protocol = FrameProtocol(
            self.dispatch, self.lost, frame_bytes_max=FRAME_BYTES_MAX,
            write_buffer_bytes_max=4 * FRAME_BYTES_MAX, pool=server.pool,
        )
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.append_bytes = 0
        self.append_bytes_max = server._conn_append_bytes_max
        self.requests_max = server._conn_requests_max
        self.tasks: set[asyncio.Task[None]] = set()
        server._conns.add(self)

    def lost(self, exc: BaseException) -> None:
        log.debug("plog connection closed: %r", exc)
        self.server._conns.discard(self)
        for t in self.tasks:
            t.cancel()
        if not self.closed.done():
            self.closed.set_result(None)

    def reply(self, rid: int, status: int, parts: list[bytes | memoryview]) -> None:
        self.protocol.send(frame(status, rid, *parts))

    def dispatch(self, op: int, rid: int, body: memoryview) -> None:
        try:
            self._dispatch(op, rid, body)
        except WireError as exc:
            self.protocol.fail(exc)

    def _dispatch(self, op: int, rid: int, body: memoryview) -> None:
        plog_id, rest = unpack_id(body)
        if op == Op.APPEND:
            (offset,), data = unpack(U64, rest)
            size = len(data)
            self.append_bytes += size
            if self.append_bytes > self.append_bytes_max:
                self.protocol.pause_reading("append bytes")

            def answered(status: int, parts: list[bytes | memoryview]) -> None:
                self.append_bytes -= size
                if self.append_bytes <= self.append_bytes_max:
                    self.protocol.resume_reading("append bytes")
                self.reply(rid, status, parts)
                # Written or refused: the store holds no view of the frame any more.
                self.server.pool.give(body)

            self.store.append(plog_id, offset, data, answered)
        elif op == Op.INFO:
            info = self.store.info(plog_id)
            if info is None:
                self.reply(rid, Status.NOT_FOUND, [b"no such plog"])
            else:
                packed = INFO.pack(info.end, info.sealed, info.seal_epoch, info.capacity)
                self.reply(rid, Status.OK, [packed])
        elif op == Op.CREATE:
            (capacity,), _ = unpack(U64, rest)
            self.spawn(rid, self.store.create(plog_id, capacity))
        elif op == Op.SEAL:
            (epoch, offset), _ = unpack(U64U64, rest)
            self.spawn(rid, self.store.seal(plog_id, epoch, offset))
        elif op == Op.DELETE:
            self.spawn(rid, self.store.delete(plog_id))
        elif op == Op.READ:
            (offset, max_bytes), _ = unpack(U64U32, rest)
            self.spawn(rid, self.store.read(plog_id, offset, min(max_bytes, READ_BYTES_MAX)))
        else:
            self.reply(rid, Status.INVALID, [f"unknown op {op}".encode()])

    def spawn(self, rid: int, call: Awaitable[tuple[int, bytes | list[bytes]]]) -> None:
        async def run() -> None:
            status, body = await call
            parts: list[bytes | memoryview] = [*body] if isinstance(body, list) else [body]
            self.reply(rid, status, parts)

        t = asyncio.ensure_future(run())
        self.tasks.add(t)
        t.add_done_callback(self.done)
        if len(self.tasks) >= self.requests_max:
            self.protocol.pause_reading("requests")

    def done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if len(self.tasks) < self.requests_max:
            self.protocol.resume_reading("requests")


async def run_server(
    data_dir: Path, host: str, port: int, zookeeper: str | None, server_id: str | None,
    root: str = DEFAULT_ROOT, disk_bytes_max: int | None = None, sweep_interval_ms: int = 300_000,
) -> None:
    """``tidegate plog-server``: serve until SIGTERM/SIGINT."""
    import signal

    server = PlogServer(
        data_dir, host, port, zookeeper=zookeeper, root=root, server_id=server_id,
        disk_bytes_max=disk_bytes_max, sweep_interval_ms=sweep_interval_ms,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    log.info("plog server ready: id=%s listen=%s:%d data-dir=%s", server.server_id, host, server.port, data_dir)
    try:
        await stop.wait()
    finally:
        await server.close()
        log.info("plog server stopped")

