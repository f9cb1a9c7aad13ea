"""A settled append (``PendingAppend``) costs the loop no callback of its own, and a
failure nobody awaits (acks=0) is not reported as an unretrieved exception, while one
that is awaited still raises."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from tidegate.gateway.log.partition_log import PendingAppend, StorageFailure


def _pending(loop: asyncio.AbstractEventLoop) -> PendingAppend:
    return PendingAppend(0, 1, memoryview(b"x"), [], loop.create_future())


def test_a_failure_nobody_awaits_is_not_reported_and_schedules_nothing() -> None:
    async def main() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        pending = _pending(loop)
        pending.settle(StorageFailure("disk gone"))
        assert not loop._ready  # type: ignore[attr-defined]  # no done callback queued
        del pending
        gc.collect()
        await asyncio.sleep(0)
        return reported

    assert asyncio.run(main()) == []


def test_an_awaited_failure_still_raises_and_on_settled_runs_once() -> None:
    async def main() -> list[str]:
        pending = _pending(asyncio.get_running_loop())
        calls: list[str] = []
        pending.on_settled = [lambda: calls.append("settled")]
        pending.settle(StorageFailure("disk gone"))
        pending.settle(StorageFailure("again"))  # settled once only
        with pytest.raises(StorageFailure, match="disk gone"):
            await pending.durable
        return calls

    assert asyncio.run(main()) == ["settled"]
