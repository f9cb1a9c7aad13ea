"""A fault-injecting ``DurableDataLog`` wrapper for recovery and failure tests.

``FaultyDurableDataLog(inner, fail_after_appends=n)`` passes the first ``n`` appends to
``inner``; append ``n + 1`` fails with ``InjectedAppendError`` and, per the contract,
closes the log: ``inner`` is closed (so appends already made still become durable) and
every later append fails with ``DataLogClosedError``. The failing append completes only
after ``inner`` has closed, so completions stay in append order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tidegate.core.segmentstore.callbacks import DoneCallback, when_done
from tidegate.core.segmentstore.tier1.api import (
    DataLogClosedError,
    DataLogError,
    DurableDataLog,
    Entry,
    EntryData,
    LogAddress,
)


class InjectedAppendError(DataLogError):
    """The append failure a ``FaultyDurableDataLog`` was told to produce."""


class FaultyDurableDataLog:
    def __init__(self, inner: DurableDataLog, *, fail_after_appends: int | None = None) -> None:
        self.inner = inner
        self._fail_after_appends = fail_after_appends
        self.appends = 0
        self._closing: asyncio.Future[None] | None = None

    @property
    def epoch(self) -> int:
        return self.inner.epoch

    async def open(self) -> None:
        await self.inner.open()

    async def append(self, entry: Entry) -> LogAddress:
        if self._closing is not None:
            await asyncio.shield(self._closing)
            raise DataLogClosedError("log closed after an injected append failure")
        self.appends += 1
        limit = self._fail_after_appends
        if limit is not None and self.appends > limit:
            self._closing = asyncio.ensure_future(self.inner.close())
            await asyncio.shield(self._closing)
            raise InjectedAppendError(f"injected failure of append #{self.appends}")
        return await self.inner.append(entry)

    def append_future(
        self, entry: Entry, on_done: DoneCallback | None = None
    ) -> asyncio.Future[LogAddress]:
        fut = asyncio.ensure_future(self.append(entry))
        when_done(fut, on_done)
        return fut

    def read(self, start: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, EntryData]]:
        return self.inner.read(start)

    async def truncate(self, upto: LogAddress) -> None:
        await self.inner.truncate(upto)

    async def close(self) -> None:
        if self._closing is not None:
            await asyncio.shield(self._closing)
        else:
            await self.inner.close()
