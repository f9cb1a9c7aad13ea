"""``WriterDataSource``: what the storage writer reads and calls on its container, as
Pravega's ``WriterDataSource`` is the writer's view of its segment container."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidegate.core.segmentstore.metadata import ContainerMetadata, SegmentMeta
from tidegate.core.segmentstore.metastore import InactiveSegments
from tidegate.core.segmentstore.reading.index import ReadIndex
from tidegate.core.segmentstore.tier1.api import DurableDataLog
from tidegate.core.segmentstore.traffic import Traffic


class WriterDataSource(Protocol):
    """The container as its storage writer (and eviction) sees it: committed metadata,
    the read index holding the bytes to flush, the Tier-1 log to truncate, and the store
    of inactive segments."""

    @property
    def id(self) -> int: ...
    @property
    def md(self) -> ContainerMetadata: ...
    @property
    def read_index(self) -> ReadIndex: ...
    @property
    def log(self) -> DurableDataLog: ...
    @property
    def inactive(self) -> InactiveSegments | None: ...
    @property
    def traffic(self) -> Traffic: ...
    @property
    def wall_clock(self) -> Callable[[], float]: ...

    def forget(self, meta: SegmentMeta) -> None:
        """Drop a deleted or merged segment the writer is done with."""

    def on_writer_stopped(self, exc: BaseException) -> None:
        """The writer met an error it cannot retry; the container is to be restarted."""
