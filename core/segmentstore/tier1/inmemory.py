"""An in-memory ``DurableDataLog`` with the same ordering, fencing and failure contract
as the file log.

"Durable" here means: held by an ``InMemoryLogBacking`` that outlives the log object,
so a test can drop a log and open a new one on the same backing to exercise recovery
and fencing inside one process. Appends are group-committed the way the file log does
it: entries queue up, and one commit step (scheduled on the event loop) moves every
queued entry into the backing and completes their futures in order.

Addresses: every ``open`` starts a new "file" (``file_id``), and a file is rolled after
``file_entries_max`` entries; ``position`` is the entry's index within its file.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from tidegate.core.segmentstore.callbacks import DoneCallback, when_done
from tidegate.core.segmentstore.tier1.api import (
    DataLogClosedError,
    DataLogError,
    DataLogFencedError,
    Entry,
    EntryData,
    LogAddress,
)


@dataclass
class InMemoryLogBacking:
    """What a crash would leave behind: committed entries, the epoch, the start."""

    entries: list[tuple[LogAddress, bytes]] = field(default_factory=list)
    epoch: int = 0
    next_file_id: int = 1


class InMemoryDurableDataLog:
    def __init__(
        self,
        backing: InMemoryLogBacking | None = None,
        *,
        in_flight_bytes_max: int = 64 * 1024 * 1024,
        file_entries_max: int = 1024,
    ) -> None:
        self.backing = backing if backing is not None else InMemoryLogBacking()
        self._file_entries_max = file_entries_max
        self._in_flight_bytes_max = in_flight_bytes_max
        self._in_flight_bytes = 0
        # Appends not yet admitted (in call order) and admitted, not yet committed.
        self._pending: deque[tuple[bytes | memoryview, asyncio.Future[LogAddress]]] = deque()
        self._epoch = 0
        self._open = False
        self._failed: BaseException | None = None
        self._file_id = 0
        self._position = 0
        self._queue: list[tuple[bytes, asyncio.Future[LogAddress]]] = []
        self._commit_scheduled = False

    @property
    def epoch(self) -> int:
        return self._epoch

    async def open(self) -> None:
        if self._open:
            raise DataLogError("already open")
        b = self.backing
        b.epoch += 1
        self._epoch = b.epoch
        self._new_file()
        self._open = True

    def _new_file(self) -> None:
        self._file_id = self.backing.next_file_id
        self.backing.next_file_id += 1
        self._position = 0

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise DataLogClosedError("log closed after a failed append") from self._failed
        if not self._open:
            raise DataLogClosedError("log not open")

    async def append(self, entry: Entry) -> LogAddress:
        return await self.append_future(entry)

    def append_future(
        self, entry: Entry, on_done: DoneCallback | None = None
    ) -> asyncio.Future[LogAddress]:
        # The order of appends is the order of these calls: the entry joins ``_pending``
        # at once and is admitted strictly from its head. ``on_done`` is an ordinary done
        # callback here: this reference model does not save event-loop hops.
        fut: asyncio.Future[LogAddress] = asyncio.get_running_loop().create_future()
        when_done(fut, on_done)
        try:
            self._check_usable()
        except DataLogError as exc:
            fut.set_exception(exc)
            return fut
        if not isinstance(entry, bytes | bytearray | memoryview):
            entry = b"".join(entry)
        self._pending.append((entry, fut))
        self._admit()
        return fut

    def _admit(self) -> None:
        while self._pending:
            size = len(self._pending[0][0])
            if self._in_flight_bytes and self._in_flight_bytes + size > self._in_flight_bytes_max:
                return
            data, fut = self._pending.popleft()
            self._in_flight_bytes += size
            self._queue.append((bytes(data), fut))
            if not self._commit_scheduled:
                self._commit_scheduled = True
                asyncio.get_running_loop().call_soon(self._commit)

    def _commit(self) -> None:
        """One group commit: every admitted entry becomes durable, then completes."""
        self._commit_scheduled = False
        queue, self._queue = self._queue, []
        self._in_flight_bytes -= sum(len(d) for d, _ in queue)
        try:
            self._commit_batch(queue)
        finally:
            self._admit()

    def _commit_batch(self, queue: list[tuple[bytes, asyncio.Future[LogAddress]]]) -> None:
        if not queue:
            return
        if self._failed is None and self.backing.epoch != self._epoch:
            self._fail(DataLogFencedError(f"epoch {self._epoch} fenced by {self.backing.epoch}"))
        if self._failed is not None:
            for _, fut in queue:
                if not fut.done():
                    fut.set_exception(self._failed)
            return
        for data, fut in queue:
            if self._position >= self._file_entries_max:
                self._new_file()
            addr = LogAddress(self._file_id, self._position)
            self._position += 1
            self.backing.entries.append((addr, data))
            if not fut.done():
                fut.set_result(addr)

    def _fail(self, exc: BaseException) -> None:
        self._failed = exc
        self._open = False
        closed = DataLogClosedError("log closed after a failed append")
        closed.__cause__ = exc
        while self._pending:
            _, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(closed)

    async def read(
        self, start: LogAddress | None = None
    ) -> AsyncIterator[tuple[LogAddress, EntryData]]:
        for addr, data in list(self.backing.entries):
            if start is None or addr >= start:
                yield addr, data

    async def truncate(self, upto: LogAddress) -> None:
        self._check_usable()
        end = LogAddress(self._file_id, self._position)
        if upto > end:
            raise DataLogError(f"truncate at {upto}, past the durable end {end}")
        self.backing.entries = [(a, d) for a, d in self.backing.entries if a >= upto]

    async def close(self) -> None:
        """Commit everything appended so far, then refuse further appends."""
        while self._queue or self._pending:
            self._commit()
        self._open = False
