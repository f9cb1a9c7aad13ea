"""The Kafka connection's transport side: size-prefixed frames in, buffers out.

``KafkaWire`` is an ``asyncio.BufferedProtocol``: the event loop receives straight into
buffers it hands out, so a request body is copied once, from the socket into the frame
it becomes (``asyncio.StreamReader`` copies every byte twice more — into its buffer and
out of it — and moves its buffer's tail down on every read, a large share of the event
loop under produce load).

- Small frames: the loop receives into a staging buffer of ``staging_bytes`` (a mapping
  whose pages are faulted in as bytes arrive: an idle connection costs a page); every
  whole frame in it is copied out (frames are writable, so produce rewrites batch
  offsets where they are); a partial one moves to the front.
- A frame larger than what the staging buffer holds gets a buffer of its own (a view of
  exactly its size, from ``FramePool.receive``: memory for it is only taken as its
  bytes arrive, or charged to a node-wide bound): the part already staged is copied in,
  the rest is received into it.
- Frames of ``POOLED_BYTES_MIN`` or more are writable views into buffers from a
  ``FramePool`` shared by the server's connections, reused once released (see
  ``gateway.net.framepool``); smaller ones are ``bytearray``s.
- A size prefix over ``frame_bytes_max()`` (read per frame, so configuration changes
  apply at once; or negative) ends reading: ``read_frame``
  raises ``FrameTooLargeError`` (a negative one ``KafkaProtocolError``) after the frames
  before it, and nothing after it is read.
- With a node-wide ``budget`` (``queued.max.request.bytes``), a frame too large to
  stage is charged to it before its body is received; while it does not fit, reading
  pauses (the partial frame stays staged) until the budget frees bytes. Such a frame
  comes out of ``read_charged`` with its charge, which the caller releases when done
  with it (``release_unread`` gives back what was never read).
- Back-pressure: reading pauses while ``buffered_bytes_max`` or more bytes of whole
  frames wait for ``read_frame``; it resumes when they are taken.
- Writes go to the transport; ``drain`` waits while the transport is above its high-water
  mark (``pause_writing``/``resume_writing``), as ``StreamWriter.drain`` does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Protocol

from tidegate.gateway.net.framepool import FramePool, lazy_buffer
from tidegate.protocol.errors import KafkaProtocolError
from tidegate.protocol.framing import SIZE_PREFIX_BYTES, frame_size

#: Frames of this size or more are taken from the pool (below it, ``bytearray`` slices:
#: Python's own allocator serves them without page faults).
POOLED_BYTES_MIN = 64 * 1024

Frame = bytes | bytearray | memoryview


class FrameTooLargeError(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(f"frame of {size} bytes")
        self.size = size


class Budget(Protocol):
    """The node-wide request bytes (``gateway.net.request_budget.RequestBudget``)."""

    def try_reserve(self, size: int, retry: Callable[[], None]) -> bool: ...
    def release(self, size: int) -> None: ...


class KafkaWire(asyncio.BufferedProtocol):
    def __init__(
        self,
        frame_bytes_max: Callable[[], int],
        on_connect: Callable[[KafkaWire], None],
        *,
        staging_bytes: int = 256 * 1024,
        buffered_bytes_max: int = 4 * 1024 * 1024,
        pool: FramePool | None = None,
        budget: Budget | None = None,
    ) -> None:
        self._frame_bytes_max = frame_bytes_max
        self._budget = budget
        self._big_reserved = 0  # bytes of ``budget`` the large frame holds
        self._budget_blocked = False  # a large frame waits for the budget
        self._on_connect = on_connect
        self._staging_view = lazy_buffer(staging_bytes)
        self._staged = 0  # bytes of the staging buffer holding data
        self._pool = FramePool() if pool is None else pool
        self._big: memoryview | None = None  # the large frame being received, if any
        self._big_filled = 0
        self._big_charged = 0  # bytes of the pool's arriving bound it holds
        self._frames: deque[tuple[Frame, int]] = deque()  # and the budget each holds
        self._frames_bytes = 0
        self._buffered_bytes_max = buffered_bytes_max
        # Why reading stopped, raised once after the queued frames; ``_stopped`` stays.
        self._error: BaseException | None = None
        self._stopped = False
        self._read_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def set_frame_bytes_max(self, frame_bytes_max: Callable[[], int]) -> None:
        """Where the largest frame accepted is read from from now on (per frame)."""
        self._frame_bytes_max = frame_bytes_max

    # -- asyncio.BufferedProtocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._closed = asyncio.get_running_loop().create_future()
        self._on_connect(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big[self._big_filled :]
        return self._staging_view[self._staged :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._stopped:
            return  # refused: whatever still arrives is dropped
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled == len(self._big):
                reserved, self._big_reserved = self._big_reserved, 0
                self._push(self._big, reserved)
                self._drop_big()
            return
        self._staged += nbytes
        self._split_staged()

    def eof_received(self) -> bool | None:
        self._stop(asyncio.IncompleteReadError(b"", None))
        if self.transport is not None and self.transport.get_extra_info("sslcontext"):
            return None  # TLS cannot stay half-open (asyncio warns if asked to)
        return True  # half-closed: the answers to what was read are still written

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_big()
        self._release_big_reservation()
        self._stop(exc if exc is not None else ConnectionResetError("connection closed"))
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("connection lost"))
        self._drain_waiters.clear()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # -- frames -------------------------------------------------------------------------

    def _split_staged(self) -> None:
        view = self._staging_view
        pos, end = 0, self._staged
        while end - pos >= SIZE_PREFIX_BYTES:
            try:
                size = frame_size(view, pos)
            except KafkaProtocolError as exc:
                self._refuse(exc)
                return
            if size > self._frame_bytes_max():
                self._refuse(FrameTooLargeError(size))
                return
            body = pos + SIZE_PREFIX_BYTES
            if end - body >= size:
                # One copy, and writable: produce rewrites batch offsets in place.
                if size < POOLED_BYTES_MIN:
                    self._push(bytearray(view[body : body + size]))
                else:
                    frame = self._pool.take(size)
                    frame[:] = view[body : body + size]
                    self._push(frame)
                pos = body + size
                continue
            if SIZE_PREFIX_BYTES + size > len(view):
                # Too large to stage: charged to the budget before its body is received
                # (else wait, the partial frame staged), then received straight into it.
                budget = self._budget
                if budget is not None:
                    if not budget.try_reserve(size, self._budget_freed):
                        self._budget_blocked = True
                        self._sync_reading()
                        break
                    self._big_reserved = size
                big, self._big_charged = self._pool.receive(size)
                have = end - body
                big[:have] = view[body:end]
                self._big, self._big_filled = big, have
                self._staged = 0
                return
            break
        if pos:
            rest = end - pos
            view[:rest] = view[pos:end]  # memoryviews copy as memmove: no temporary
            self._staged = rest

    def _budget_freed(self) -> None:
        if self._stopped or not self._budget_blocked:
            return  # closed meanwhile
        self._budget_blocked = False
        self._split_staged()
        self._sync_reading()

    def _release_big_reservation(self) -> None:
        reserved, self._big_reserved = self._big_reserved, 0
        if reserved and self._budget is not None:
            self._budget.release(reserved)

    def release_unread(self) -> None:
        """Give back the budget held by frames never read and a frame still arriving
        (the reader is done with this connection)."""
        self._budget_blocked = False
        while self._frames:
            frame, charged = self._frames.popleft()
            self._frames_bytes -= len(frame)
            if charged and self._budget is not None:
                self._budget.release(charged)
        self._release_big_reservation()

    def _sync_reading(self) -> None:
        """Pause reading while frames wait or a large frame waits for the budget; resume
        otherwise, unless reading stopped for good."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        pause = self._budget_blocked or self._frames_bytes >= self._buffered_bytes_max
        if pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not pause and self._reading_paused and not self._stopped:
            self._reading_paused = False
            transport.resume_reading()

    def _drop_big(self) -> None:
        self._big = None
        self._pool.arrived(self._big_charged)
        self._big_charged = 0

    def _refuse(self, exc: BaseException) -> None:
        """Stop reading for good: the frames before this point are still served."""
        self._staged = 0
        self._stop(exc)
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _push(self, frame: Frame, charged: int = 0) -> None:
        self._frames.append((frame, charged))
        self._frames_bytes += len(frame)
        self._sync_reading()
        self._wake_reader()

    def _stop(self, exc: BaseException) -> None:
        if not self._stopped:
            self._stopped, self._error = True, exc
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter = self._read_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _take_error(self) -> BaseException:
        """The stop reason, raised once and not kept, and no local names it: its
        traceback holds the raising frame, hence ``self``, a cycle only a full
        collection frees (the server runs with ``gc.freeze()``)."""
        exc, self._error = self._error, None
        return exc if exc is not None else ConnectionResetError("connection closed")

    async def read_frame(self) -> Frame:
        """The next request frame (without its size prefix). Raises
        ``asyncio.IncompleteReadError`` at end of stream, ``ConnectionError`` when the
        connection was lost, ``FrameTooLargeError`` for an oversized prefix."""
        frame, charged = await self.read_charged()
        if charged and self._budget is not None:
            self._budget.release(charged)
        return frame

    async def read_charged(self) -> tuple[Frame, int]:
        """The next request frame and the bytes of the budget it holds (0: none), to be
        released by the caller; raises as ``read_frame``."""
        while not self._frames:
            if self._stopped:
                raise self._take_error()
            self._read_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._read_waiter
            finally:
                self._read_waiter = None
        frame, charged = self._frames.popleft()
        self._frames_bytes -= len(frame)
        self._sync_reading()
        return frame, charged

    # -- writes -------------------------------------------------------------------------

    @property
    def writable_now(self) -> bool:
        """Open and not paused for writing: a write now needs no ``drain`` first."""
        return (
            self.transport is not None
            and not self.transport.is_closing()
            and not self._write_paused
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def drain(self) -> None:
        if self.transport is None or self.transport.is_closing():
            if self._closed is not None and self._closed.done():
                raise ConnectionResetError("connection lost")
            await asyncio.sleep(0)
            return
        if not self._write_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def wait_closed(self) -> None:
        if self._closed is not None:
            await self._closed

    def get_extra_info(self, name: str) -> object:
        return None if self.transport is None else self.transport.get_extra_info(name)
