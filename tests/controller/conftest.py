"""Controller test fixtures: a controller on the in-memory segment store, with the
background policies off unless a test turns them on, and a clock tests can move."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from core.controller.config import ControllerConfig
from core.controller.controller import StreamController
from core.segmentstore.inmemory import InMemorySegmentStore

QUIET = ControllerConfig(
    autoscale_period_ms=0, retention_period_ms=0, txn_timeout_check_period_ms=0
)


class Clock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> InMemorySegmentStore:
    return InMemorySegmentStore()


@pytest.fixture
async def ctl(store: InMemorySegmentStore, clock: Clock) -> AsyncIterator[StreamController]:
    c = StreamController(store, QUIET, clock=clock)
    await c.start()
    await c.create_scope("s")
    yield c
    await c.close()
