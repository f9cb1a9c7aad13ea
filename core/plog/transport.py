"""``FrameProtocol``: the plog protocol's frames over an asyncio transport, for the
server's connections and the client's alike.

Reading: an ``asyncio.BufferedProtocol``, so the event loop receives straight into
buffers handed out here and each frame's bytes are copied at most once (a
``StreamReader`` copies every byte into its buffer, out again, and moves the buffer's
tail down on every read; with every entry going to three servers that was most of a
node's event loop). Frames smaller than the staging buffer are copied out of it as
``bytes``; a larger one (an append or read of up to 2 MiB) is received into a buffer of
its own. Each whole frame goes to ``on_frame(code, request id, body)`` at once, without
a task or a future per frame. A length prefix out of bounds ends the connection
(``WireError`` to ``on_lost``).

Writing: ``send`` hands small parts to the transport joined into one buffer and large
ones as they are (Python 3.11's ``writelines`` joins every part, a copy of each payload
per server). The transport copies only what the socket does not take at once.

Back-pressure: ``pause_reading``/``resume_reading`` by reason (reading resumes when no
reason is left), one of them the write back-log when ``write_buffer_bytes_max`` is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tidegate.core.plog.wire import FRAME_HEADER_BYTES, LENGTH_BYTES, WireError

#: Parts at least this large are written on their own (sent straight from the caller's
#: buffer when the socket takes them); smaller ones are joined.
LARGE_PART_BYTES = 16 * 1024
STAGING_BYTES = 256 * 1024

OnFrame = Callable[[int, int, memoryview], None]  # code (op or status), request id, body


class BufferPool:
    """Buffers for frames too large to stage, kept for reuse once given back: a fresh
    one of that size is a mapping of its own (glibc's mmap threshold), faulted in page by
    page and unmapped when freed, for every append. Size classes are powers of two; at
    most ``bytes_max`` of free buffers are kept. Used on the event loop only."""

    def __init__(self, bytes_max: int = 32 * 1024 * 1024) -> None:
        self.bytes_max = bytes_max
        self._free: dict[int, list[bytearray]] = {}
        self._free_bytes = 0

    def take(self, n: int) -> memoryview:
        size = 1 << max(n - 1, 1).bit_length()
        free = self._free.get(size)
        if free:
            self._free_bytes -= size
            return memoryview(free.pop())[:n]
        return memoryview(bytearray(size))[:n]

    def give(self, view: memoryview) -> None:
        """Take back the buffer under ``view`` (a frame from ``take``; anything else is
        left alone). The caller holds no view of it any more."""
        buf = view.obj
        if not isinstance(buf, bytearray):
            return
        size = len(buf)
        if size & (size - 1) or self._free_bytes + size > self.bytes_max:
            return
        self._free.setdefault(size, []).append(buf)
        self._free_bytes += size


class FrameProtocol(asyncio.BufferedProtocol):
    def __init__(
        self,
        on_frame: OnFrame,
        on_lost: Callable[[BaseException], None],
        *,
        frame_bytes_max: int,
        write_buffer_bytes_max: int | None = None,
        staging_bytes: int = STAGING_BYTES,
        pool: BufferPool | None = None,
    ) -> None:
        """``write_buffer_bytes_max``: while more bytes than this wait to be sent, reading
        pauses (a server: its answers pile up while the client does not read them).
        ``pool``: where frames too large to stage are received (the owner gives each
        back once done with it); without one each gets a fresh buffer."""
        self._pool = pool
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._write_buffer_bytes_max = write_buffer_bytes_max
        self._frame_bytes_max = frame_bytes_max
        self._staging = memoryview(bytearray(staging_bytes))
        self._staged = 0
        self._big: memoryview | None = None  # a frame too large to stage, being received
        self._big_filled = 0
        #: Why reading is paused; while any reason holds, staged frames wait too.
        self._paused: set[str] = set()
        self._splitting = False  # in ``_split``: a resume from a frame's handler waits for it
        self._stopped = False  # nothing more is delivered
        self._error: BaseException | None = None  # why this side ended the connection
        self.transport: asyncio.Transport | None = None

    # -- asyncio.BufferedProtocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self._write_buffer_bytes_max is not None:
            transport.set_write_buffer_limits(high=self._write_buffer_bytes_max)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big[self._big_filled :]
        return self._staging[self._staged :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._stopped:
            return
        big = self._big
        if big is not None:
            self._big_filled += nbytes
            if self._big_filled == len(big):
                self._big = None
                if not self._ended():
                    self._deliver(big)
            return
        self._staged += nbytes
        if not self._ended():
            self._split()

    def eof_received(self) -> bool | None:
        return False  # close: neither side half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._stopped = True
        self._big = None
        self._on_lost(self._error or exc or ConnectionResetError("connection closed"))

    def pause_writing(self) -> None:
        if self._write_buffer_bytes_max is not None:
            self.pause_reading("writes")

    def resume_writing(self) -> None:
        self.resume_reading("writes")

    # -- frames ------------------------------------------------------------------------

    def _split(self) -> None:
        view = self._staging
        pos, end = 0, self._staged
        self._splitting = True
        while end - pos >= LENGTH_BYTES and not self._paused and not self._ended():
            n = int.from_bytes(view[pos : pos + LENGTH_BYTES], "big")
            if n < FRAME_HEADER_BYTES - LENGTH_BYTES or n > self._frame_bytes_max:
                self._splitting = False
                self._fail(WireError(f"frame of {n} bytes"))
                return
            body = pos + LENGTH_BYTES
            if end - body >= n:
                self._deliver(memoryview(bytes(view[body : body + n])))  # the one copy
                pos = body + n
                continue
            if LENGTH_BYTES + n > len(view):  # too large to stage: received into its own
                big = memoryview(bytearray(n)) if self._pool is None else self._pool.take(n)
                have = end - body
                big[:have] = view[body:end]
                self._big, self._big_filled = big, have
                self._staged = 0
                self._splitting = False
                return
            break
        self._splitting = False
        rest = end - pos
        if pos and rest:
            view[:rest] = view[pos:end]  # a memoryview copy is a memmove: no temporary
        self._staged = rest

    def _ended(self) -> bool:
        """Stopped, or closed by the owner (a frame it refused): nothing more is read."""
        return self._stopped or self.transport is None or self.transport.is_closing()

    def _deliver(self, body: memoryview) -> None:
        self._on_frame(body[0], int.from_bytes(body[1:5], "big"), body[5:])

    def fail(self, exc: BaseException) -> None:
        """End the connection at once for ``exc`` (reported to ``on_lost``)."""
        self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._stopped = True
        self._staged = 0
        self._error = exc
        if self.transport is not None:
            self.transport.abort()  # connection_lost follows and reports ``exc``

    # -- control -----------------------------------------------------------------------

    def pause_reading(self, reason: str) -> None:
        if not self._paused and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._paused.add(reason)

    def resume_reading(self, reason: str) -> None:
        if reason not in self._paused:
            return
        self._paused.discard(reason)
        if self._paused or self.transport is None or self.transport.is_closing():
            return
        if self._staged and not self._splitting and self._big is None:
            self._split()  # frames staged before the pause (it may pause again)
        if not self._paused:
            self.transport.resume_reading()

    def send(self, parts: list[bytes | memoryview]) -> None:
        """Write ``parts`` back to back, in order after everything sent before."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        small: list[bytes | memoryview] = []
        for part in parts:
            if len(part) < LARGE_PART_BYTES:
                small.append(part)
                continue
            if small:
                transport.write(b"".join(small))
                small = []
            transport.write(part)
        if small:
            transport.write(b"".join(small) if len(small) > 1 else small[0])

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
