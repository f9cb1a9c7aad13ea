"""Controller test fixtures: a controller on the in-memory segment store, with the
background policies off unless a test turns them on, and a clock tests can move."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.api import SegmentStore
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.core.segmentstore.service import StreamSegmentStore

QUIET = ControllerConfig(
    autoscale_period_ms=0,
    retention_period_ms=0,
    txn_timeout_check_period_ms=0,
    watermark_period_ms=0,
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


#: Containers of the durable store in these tests (a module may override the fixture).
CONTAINERS = 2


@pytest.fixture
def container_count() -> int:
    return CONTAINERS


@pytest.fixture(params=["inmemory", "durable"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, container_count: int
) -> AsyncIterator[SegmentStore]:
    """Each scenario runs on the in-memory model and on the durable store (files on
    disk in a temporary directory)."""
    if request.param == "inmemory":
        yield InMemorySegmentStore()
        return
    s = StreamSegmentStore(tmp_path / "data", SegmentStoreConfig(container_count=container_count))
    await s.start()
    yield s
    await s.close()


@pytest.fixture
async def ctl(store: SegmentStore, clock: Clock) -> AsyncIterator[StreamController]:
    c = StreamController(store, QUIET, clock=clock)
    await c.start()
    await c.create_scope("s")
    yield c
    await c.close()
