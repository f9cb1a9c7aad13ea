"""``PlogConnection``: one client connection to one plog server, requests pipelined.

``request`` returns a future at once (frames written before the connection is up wait
in order for it); responses are paired by request id, so a server may answer out of
order. When the connection fails or is closed, every unanswered request fails with
``ServerUnavailableError`` and no later answer is seen: a server the client gave up on
cannot complete anything afterwards.
"""

from __future__ import annotations

import asyncio
import time

from tidegate.core.plog.transport import FrameProtocol
from tidegate.core.plog.wire import FRAME_BYTES_MAX, frame


class ServerUnavailableError(ConnectionError):
    """A plog server did not answer (connection failed, closed, or timed out)."""


Answer = tuple[int, memoryview]  # status, body

#: A read answer carries a few header bytes beyond the largest read.
READ_SLACK = 64


class PlogConnection:
    def __init__(self, server_id: str, host: str, port: int, *, connect_timeout_s: float = 5.0) -> None:
        self.server_id = server_id
        self.host, self.port = host, port
        self._connect_timeout_s = connect_timeout_s
        self._next_id = 0
        #: Unanswered requests, oldest first: their futures and when they were sent.
        self.pending: dict[int, tuple[asyncio.Future[Answer], float]] = {}
        self._protocol: FrameProtocol | None = None
        self._connected = False
        self._queued: list[bytes | memoryview] = []
        self.failure: BaseException | None = None
        self._task = asyncio.ensure_future(self._connect())

    @property
    def closed(self) -> bool:
        return self.failure is not None

    def request(self, op: int, *parts: bytes | memoryview) -> asyncio.Future[Answer]:
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        if self.failure is not None:
            fut.set_exception(ServerUnavailableError(f"{self.server_id}: {self.failure}"))
            return fut
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        rid = self._next_id
        self.pending[rid] = (fut, time.monotonic())
        bufs = frame(op, rid, *parts)
        if self._connected:
            assert self._protocol is not None
            self._protocol.send(bufs)
        else:
            self._queued.extend(bufs)
        return fut

    def oldest_age_s(self, now: float) -> float:
        for _, sent in self.pending.values():
            return now - sent
        return 0.0

    def close(self, reason: str = "closed") -> None:
        if self.failure is None:
            self.failure = ServerUnavailableError(f"{self.server_id}: {reason}")
        self._task.cancel()
        if self._protocol is not None:
            self._protocol.close()
        self._fail_pending()

    def _fail_pending(self) -> None:
        pending, self.pending = self.pending, {}
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(ServerUnavailableError(f"{self.server_id}: {self.failure}"))

    def _on_frame(self, status: int, rid: int, body: memoryview) -> None:
        entry = self.pending.pop(rid, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result((status, body))

    def _on_lost(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self._fail_pending()

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        protocol = FrameProtocol(self._on_frame, self._on_lost, frame_bytes_max=FRAME_BYTES_MAX + READ_SLACK)
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: protocol, self.host, self.port), self._connect_timeout_s
            )
        except asyncio.CancelledError:
            # Cancelled from outside (the event loop shutting down, or closed before the
            # connection was up): nothing failed, so nothing is reported as the server's.
            if self.failure is None:
                self.failure = ConnectionError("cancelled")
            pending, self.pending = self.pending, {}
            for fut, _ in pending.values():
                fut.cancel()
            raise
        except (OSError, TimeoutError) as exc:
            if self.failure is None:
                self.failure = exc
            self._fail_pending()
            return
        self._protocol = protocol
        if self.failure is not None:  # closed while connecting
            transport.close()
            return
        self._connected = True
        queued, self._queued = self._queued, []
        protocol.send(queued)
