"""``LogServices``: what one partition log uses of the gateway's partition logs, so
``partition_log`` does not import ``partitions`` (which holds the logs)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from tidegate.core.controller.api import SegmentRecord
from tidegate.core.segmentstore.api import SegmentStore
from tidegate.gateway.log.offset_index import IndexWrite, OffsetIndex
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.topics import TopicRegistry
from tidegate.protocol.record_batch import BatchHeader


class TrafficSink(Protocol):
    """Where appends are counted (``gateway/log/traffic.py``, for the auto-scaler)."""

    def record(self, topic: str, partition: int, nbytes: int, events: int) -> None: ...

    def forget_topic(self, topic: str) -> None: ...


class IndexHook(Protocol):
    """Told of every append as it is indexed, in offset order per partition, with the
    index write it may add to (the transaction index, ``gateway.txn.partition_txns``)."""

    def on_indexed(
        self, write: IndexWrite, topic: str, partition: int,
        batches: Iterable[BatchHeader], payload: bytes | memoryview,
    ) -> None: ...

    def forget_topic(self, topic: str) -> None: ...

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop what is held in memory of the partition (an index write failed after
        ``on_indexed`` applied it): it is read again from the index, as written."""

    def trim(self, topic: str, partition: int, log_start_offset: int) -> None: ...


class LogServices(Protocol):
    """The topics (current segment of a partition), the segment store appends go to, the
    offset index and producer state written once an append is durable, the retry
    budget, and the index markers of each segment (``PartitionLogs``)."""

    @property
    def topics(self) -> TopicRegistry: ...
    @property
    def store(self) -> SegmentStore: ...
    @property
    def index(self) -> OffsetIndex: ...
    @property
    def producers(self) -> ProducerStates: ...
    @property
    def closed(self) -> bool: ...
    @property
    def refresh_attempts(self) -> int: ...
    @property
    def append_retries_max(self) -> int: ...
    @property
    def append_retry_delay_ms(self) -> int: ...
    @property
    def traffic(self) -> TrafficSink | None: ...
    @property
    def index_hook(self) -> IndexHook | None: ...
    @property
    def succession(self) -> Callable[[str, int, SegmentRecord], Awaitable[bool]] | None: ...

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The epoch stamped on the partition's appended batches (-1: leave them as sent)."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task the logs cancel when they close."""

    def mark_indexed(self, segment: str, start: int, end: int) -> int | None:
        """Note the append at ``[start, end)`` of ``segment`` is indexed; the segment's new
        marker if it moved."""

    def forget_marker(self, segment: str) -> None:
        """Drop what is known of ``segment``'s indexed appends beyond its stored marker."""

    def when_index_writable(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once, when the offset index takes writes again after one
        failed (``OffsetIndex.recover`` succeeded)."""
