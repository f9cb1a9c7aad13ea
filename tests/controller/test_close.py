"""The controller's close (a node giving up controller leadership) ends its background
jobs even when a job swallowed its cancellation, and never waits on one for good.
Python 3.11's ``asyncio.wait_for`` can swallow a cancellation when what it waits for ends
at that moment; once, a job that did so kept the close waiting, the node's leadership
changes behind it, and the cluster on a dead node."""

from __future__ import annotations

import asyncio

from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

ONLY_TXN_TIMEOUTS = ControllerConfig(
    autoscale_period_ms=0, retention_period_ms=0, txn_timeout_check_period_ms=10,
    watermark_period_ms=0,
)


async def test_close_ends_a_job_that_swallowed_its_cancellation() -> None:
    controller = StreamController(InMemorySegmentStore(), ONLY_TXN_TIMEOUTS)
    entered = asyncio.Event()

    async def swallows() -> None:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass  # what 3.11's wait_for can do

    controller.txns.expire = swallows  # type: ignore[method-assign]
    await controller.start()
    await asyncio.wait_for(entered.wait(), 10)
    jobs = list(controller._tasks)
    await asyncio.wait_for(controller.close(), 5)  # before: waited for ever
    assert all(job.done() for job in jobs)
