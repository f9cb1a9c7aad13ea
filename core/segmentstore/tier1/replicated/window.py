"""The owner's write window of a replicated log: the plogs it writes (the active one,
and one being switched away from) and the entries in flight, each assigned to a place
in one of them."""

from __future__ import annotations

import asyncio

from tidegate.core.segmentstore.callbacks import DoneCallback
from tidegate.core.segmentstore.tier1.api import LogAddress
from tidegate.core.segmentstore.tier1.replicated.reader import plog_seed


class WritePlog:
    """A plog this owner writes: the active one, or one being switched away from."""

    def __init__(self, index: int, plog_id: str, servers: list[str], *, recorded: bool) -> None:
        self.index = index
        self.id = plog_id
        self.servers = servers
        self.seed = plog_seed(plog_id)
        self.recorded = recorded
        self.sent = 0  # bytes assigned to entries
        self.flushed = 0  # bytes handed to the connections
        self.outbox: list[memoryview] = []
        self.durable = dict.fromkeys(servers, 0)
        self.final: int | None = None  # its recorded end, once sealed

    def ack_end(self) -> int:
        return self.final if self.final is not None else min(self.durable.values())


class InFlight:
    __slots__ = ("views", "size", "fut", "on_done", "seg", "start", "end")

    def __init__(self, views: list[memoryview], size: int, fut: asyncio.Future[LogAddress],
                 on_done: DoneCallback | None) -> None:
        self.views, self.size, self.fut, self.on_done = views, size, fut, on_done
        self.seg: WritePlog | None = None
        self.start = self.end = 0
