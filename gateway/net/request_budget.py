"""The node-wide bound on request bytes being served (Kafka's
``queued.max.request.bytes``).

Each connection reads ahead up to ``max.in.flight.requests.per.connection`` requests;
on its own that bounds a connection, not the node. A request frame read from any
connection holds its size in a ``RequestBudget`` from the moment it is read until its
handler is done (its answer is ready, or it failed or was dropped). While the budget
is spent, a connection that has read a frame waits with it and reads no further (its
socket fills and the client waits). Waiters are served in arrival order. A frame
larger than the whole budget is let in once nothing else holds any, so no request
waits forever. A limit of 0 or less means no bound.

A large frame is charged before its body arrives (``try_reserve``, Kafka's memory pool
does the same): a connection whose frame does not fit stops reading until bytes are
released, so frames still arriving are bounded by the budget too, not by what clients
announce and half send.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable


class RequestBudget:
    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        #: Bytes held now, and the most ever held (for tests and stats).
        self.used = 0
        self.peak = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        #: Called once when bytes are released: reservations that did not fit.
        self._retries: list[Callable[[], None]] = []

    def _fits(self, size: int) -> bool:
        return self.limit <= 0 or self.used == 0 or self.used + size <= self.limit

    def _take(self, size: int) -> None:
        self.used += size
        self.peak = max(self.peak, self.used)

    async def acquire(self, size: int) -> None:
        """Hold ``size`` bytes, waiting behind earlier waiters until they fit."""
        if not self._waiters and self._fits(size):
            self._take(size)
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted, then cancelled before it was used
            else:
                with contextlib.suppress(ValueError):  # ``_grant`` may have dropped it
                    self._waiters.remove(entry)
                self._grant()  # those behind it may fit now
                self._retry()
            raise

    def try_reserve(self, size: int, retry: Callable[[], None]) -> bool:
        """Hold ``size`` bytes now if they fit and no one waits; else False, and
        ``retry`` is called (once) after bytes are next released."""
        if not self._waiters and self._fits(size):
            self._take(size)
            return True
        self._retries.append(retry)
        return False

    def release(self, size: int) -> None:
        self.used -= size
        self._grant()
        self._retry()

    def _retry(self) -> None:
        retries, self._retries = self._retries, []
        for retry in retries:
            retry()

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters:
            size, waiter = waiters[0]
            if waiter.done():  # cancelled
                waiters.popleft()
                continue
            if not self._fits(size):
                return
            waiters.popleft()
            self._take(size)
            waiter.set_result(None)
