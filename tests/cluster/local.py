"""In-process stand-ins for ``ClusterNode`` tests over a real ZooKeeper: a node's own
containers (``LocalContainers``) and a polling wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Containers:
    """``LocalContainers`` that start and stop at once, counting the starts."""

    def __init__(self) -> None:
        self.running: set[int] = set()
        self.starts = 0

    async def start_container(self, cid: int) -> None:
        self.starts += 1
        self.running.add(cid)

    async def stop_container(self, cid: int) -> None:
        self.running.discard(cid)

    def plog_server_gone(self, server_id: str, reason: str) -> None:
        pass

    def plog_server_back(self, server_id: str) -> None:
        pass

    def release(self, cid: int) -> None:
        pass


async def until(check: Callable[[], object], timeout_s: float) -> None:
    """Poll ``check`` every 50 ms until it is truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
