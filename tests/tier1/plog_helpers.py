"""Shared by the replicated-log failure tests and their child process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tidegate.core.segmentstore.tier1.api import LogAddress


def payload(i: int) -> bytes:
    size = (i * 7919) % 3000 + 8
    return (i.to_bytes(8, "big") * (size // 8 + 1))[:size]


def payload_id(data: bytes) -> int:
    return int.from_bytes(data[:8], "big")


class Appender:
    """Appends ``payload(i)`` for i = 0, 1, ... with ``window`` in flight; records each
    acknowledgement (address, time) until stopped or the log fails."""

    def __init__(self, append: Callable[[bytes], asyncio.Future[LogAddress]], window: int = 32) -> None:
        self._append = append
        self.acked: dict[int, tuple[LogAddress, float]] = {}
        self.errors: list[BaseException] = []
        self._window = window
        self._stop = False
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        sem = asyncio.Semaphore(self._window)
        i = 0
        while not self._stop and not self.errors:
            await sem.acquire()
            fut = self._append(payload(i))

            def done(f: asyncio.Future[LogAddress], i: int = i) -> None:
                sem.release()
                if f.exception() is not None:
                    self.errors.append(f.exception())  # type: ignore[arg-type]
                else:
                    self.acked[i] = (f.result(), time.monotonic())

            fut.add_done_callback(done)
            i += 1

    async def wait_acked(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < count:
            if self.errors:
                raise AssertionError(f"appends failed: {self.errors[0]!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(self.acked)} of {count} acknowledged in {timeout_s}s")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self._stop = True
        await self.task


def check_read_back(read: list[tuple[LogAddress, bytes]], acked: dict[int, tuple[LogAddress, float]]) -> None:
    """The log holds payloads 0, 1, ... once each, in order, intact; every acknowledged
    one at the address its acknowledgement gave."""
    ids = [payload_id(d) for _, d in read]
    assert ids == list(range(len(ids))), f"not dense/ordered: first bad at {next(i for i, x in enumerate(ids) if x != i)}"
    for (addr, data), i in zip(read, ids, strict=True):
        assert data == payload(i)
        if i in acked:
            assert acked[i][0] == addr, (i, acked[i][0], addr)
    missing = [i for i in acked if i >= len(ids)]
    assert not missing, f"acknowledged entries lost: {missing[:10]}"


