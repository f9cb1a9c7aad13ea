"""The durable log of one container: operation queue → data frames → Tier-1 → commit.

``add`` is synchronous: the operation is serialized into the open frame at once, so
the order of ``add`` calls is the order in the log. The open frame is cut when full or
at the end of the current event-loop iteration (so every operation queued in one
iteration shares a frame), handed to ``DurableDataLog.append`` (up to
``frames_in_flight_max`` frames at a time; the log group-commits them), and once a frame
is durable every operation whose last byte lies in it is committed (``on_commit``, in
log order) and its caller's future resolved (and the operation's ``on_done`` called).
The log calls ``_on_frame_done`` right after it completes a frame, and the operations'
``on_done`` are called right after their futures: a commit reaches the caller in the
loop turn in which Tier-1 reported it.

If a frame fails, it and every later frame fail: their callers get
``StoreShutdownError`` and ``on_failure`` stops the container. Nothing is rolled back in
memory; the container recovers from Tier-1 on its next start.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from tidegate.core.segmentstore.api import StoreShutdownError
from tidegate.core.segmentstore.callbacks import call_now
from tidegate.core.segmentstore.durablelog.frames import (
    FRAME_HEAD,
    FRAME_VERSION,
    NO_OP_START,
    SESSION_START,
)
from tidegate.core.segmentstore.operations import Operation, serialize
from tidegate.core.segmentstore.tier1.api import DurableDataLog, LogAddress

#: An operation at least this large makes its frame go to Tier-1 as a list of parts (its
#: payload is not copied again); a frame of smaller ones only is joined into one buffer
#: (one C-level copy costs less than walking thousands of small parts in Python).
LARGE_OP_BYTES = 16 * 1024


class _Frame:
    __slots__ = ("parts", "size", "starts", "completes", "first_op_pos", "large")

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.size = 0
        self.large = False
        self.starts: list[Operation] = []  # ops whose first byte is here (at op.frame_pos)
        self.completes: list[Operation] = []
        self.first_op_pos = NO_OP_START


class DurableLog:
    def __init__(
        self,
        log: DurableDataLog,
        *,
        frame_bytes_max: int,
        frames_in_flight_max: int,
        on_commit: Callable[[list[Operation]], None],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        if frame_bytes_max <= FRAME_HEAD.size + 16:
            raise ValueError("frame_bytes_max too small")
        self._log = log
        self._payload_max = frame_bytes_max - FRAME_HEAD.size
        self._frames_in_flight_max = frames_in_flight_max
        self._on_commit = on_commit
        self._on_failure = on_failure
        self._cur = _Frame()
        self._ready: deque[tuple[_Frame, list[bytes | memoryview]]] = deque()
        self._inflight: deque[tuple[_Frame, asyncio.Future[LogAddress]]] = deque()
        self._session_start = True
        self._cut_scheduled = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._failed: BaseException | None = None
        self._running = False
        self._loop: asyncio.AbstractEventLoop
        #: Bytes serialized since the container started (drives checkpoints).
        self.bytes_logged = 0
        self.ops_logged = 0
        self.last_address: LogAddress | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._running = True

    @property
    def failed(self) -> BaseException | None:
        return self._failed

    # -- queueing -----------------------------------------------------------------------

    def add(self, op: Operation, *, new_frame: bool = False) -> None:
        """Queue ``op`` (its ``seq`` already set). With ``new_frame`` it starts a frame
        of its own (checkpoints do, so Tier-1 can be truncated right before them)."""
        if self._failed is not None:
            raise StoreShutdownError(op.name, f"durable log failed: {self._failed}")
        cur = self._cur
        if (new_frame and cur.size) or cur.size >= self._payload_max:
            self._cut()
            cur = self._cur
        if cur.first_op_pos == NO_OP_START:
            cur.first_op_pos = cur.size
        op.frame_pos = cur.size
        cur.starts.append(op)
        parts, size = serialize(op)
        large = size >= LARGE_OP_BYTES
        if cur.size + size <= self._payload_max:
            cur.parts += parts
            cur.size += size
            cur.large |= large
            self.bytes_logged += size
        else:
            for part in parts:
                self._write(part, large)
        self._cur.completes.append(op)
        self.ops_logged += 1
        if not self._cut_scheduled:
            self._idle.clear()
            self._cut_scheduled = True
            self._loop.call_soon(self._cut_soon)

    def _write(self, part: bytes | memoryview, large: bool) -> None:
        n = len(part)
        self.bytes_logged += n
        while n:
            cur = self._cur
            cur.large |= large
            room = self._payload_max - cur.size
            if room <= 0:
                self._cut()
                continue
            if n <= room:
                cur.parts.append(part)
                cur.size += n
                return
            mv = memoryview(part)
            cur.parts.append(mv[:room])
            cur.size += room
            part = mv[room:]
            n -= room
            self._cut()

    def _cut_soon(self) -> None:
        self._cut_scheduled = False
        self._cut()

    def _cut(self) -> None:
        cur = self._cur
        if not cur.size:
            return
        flags = SESSION_START if self._session_start else 0
        self._session_start = False
        head = FRAME_HEAD.pack(FRAME_VERSION, flags, cur.first_op_pos)
        # A frame holding a large operation goes to Tier-1 as its parts (written back
        # to back with pwritev): no join, which copied every byte once more on the
        # event loop. Small operations only: one join.
        parts: list[bytes | memoryview] = [head, *cur.parts]
        if not cur.large:
            parts = [b"".join(parts)]
        cur.parts = []
        self._cur = _Frame()
        self._ready.append((cur, parts))
        self._pump()

    def _pump(self) -> None:
        while self._ready and len(self._inflight) < self._frames_in_flight_max:
            frame, data = self._ready.popleft()
            # The log queues each entry in call order and commits it through
            # ``_on_frame_done``, called as the entry completes.
            fut = self._log.append_future(data, self._on_frame_done)
            self._inflight.append((frame, fut))

    # -- commit -------------------------------------------------------------------------

    def _on_frame_done(self, task: asyncio.Future[LogAddress]) -> None:
        """Commit the durable prefix of the frames in flight, in log order. Called by
        the log as the frame's append completes (no task, no event-loop hop in between)."""
        if not task.cancelled():
            task.exception()  # retrieved here; a failure is handled below, in order
        if not self._running or self._failed is not None:
            return
        inflight = self._inflight
        while inflight and inflight[0][1].done():
            frame, done = inflight[0]
            try:
                if done.cancelled():
                    raise StoreShutdownError("durable log", "append to the log cancelled")
                addr = done.result()
                if self.last_address is not None and addr <= self.last_address:
                    raise RuntimeError(f"log completed out of order: {addr}")
            except BaseException as exc:  # noqa: BLE001 - every failure stops the log
                self._fail(exc)
                return
            inflight.popleft()
            self.last_address = addr
            for op in frame.starts:
                op.address = addr
            try:
                self._on_commit(frame.completes)
            except Exception as exc:
                self._fail(exc)
                return
            for op in frame.completes:
                fut, on_done = op.future, op.on_done
                if fut is not None:
                    op.future = op.on_done = None
                    if not fut.done():
                        fut.set_result(op.result)
                        if on_done is not None:
                            call_now(on_done, fut)
        self._pump()
        if not inflight and not self._ready and not self._cur.size:
            self._idle.set()

    def _fail(self, exc: BaseException) -> None:
        self._failed = exc
        frames = [f for f, _ in self._inflight] + [f for f, _ in self._ready] + [self._cur]
        self._inflight.clear()
        self._ready.clear()
        self._cur = _Frame()
        for frame in frames:
            for op in frame.completes:
                fut, on_done = op.future, op.on_done
                if fut is not None and not fut.done():
                    op.future = op.on_done = None
                    fut.set_exception(StoreShutdownError(op.name, f"durable log failed: {exc}"))
                    if on_done is not None:
                        call_now(on_done, fut)
        self._idle.set()
        self._on_failure(exc)

    async def drain(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        self._cut()
        await self._idle.wait()

    async def stop(self) -> None:
        """Stop committing: appends still in flight in the log complete nothing."""
        self._running = False
