"""The segment store as its callers (gateway, controller) see it.

A segment is an append-only byte sequence with a name, attributes and a start offset.
A table segment is a key/value map kept in a segment. Both go through the container's
durable log: a call that changes anything returns only once the change is durable in
Tier-1, and after a crash exactly the acknowledged changes are visible, in order.

Ordering: appends to one segment are applied in the order the calls were made (one
asyncio task's sequential awaits; concurrent callers are ordered by arrival). An append
never interleaves with another.

Errors are the ``SegmentStoreError`` subclasses below, never bare exceptions; a failed
call leaves stored data untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tidegate.core.segmentstore.callbacks import DoneCallback

# Re-exported: the gateway's metrics export a Tier-1 log's latencies with these bounds.
from tidegate.core.segmentstore.tier1.timing import LATENCY_BOUNDS_S as LATENCY_BOUNDS_S
from tidegate.core.segmentstore.tier1.timing import LatencyCounts as LatencyCounts

# ---------------------------------------------------------------------------------------
# Errors


class SegmentStoreError(Exception):
    """Base of every error the segment store raises; ``segment`` names the target."""

    def __init__(self, segment: str, message: str = "") -> None:
        super().__init__(f"{segment}: {message}" if message else segment)
        self.segment = segment


class SegmentNotFoundError(SegmentStoreError):
    """The segment does not exist (never created, deleted, or merged away)."""


class SegmentExistsError(SegmentStoreError):
    pass


class SegmentSealedError(SegmentStoreError):
    """The segment is sealed: no appends, no attribute updates, no merges into it."""


class BadOffsetError(SegmentStoreError):
    """An append's expected offset did not match the length, or a read/truncate offset
    lies outside the segment."""

    def __init__(self, segment: str, message: str = "", *, actual: int = -1) -> None:
        super().__init__(segment, message)
        self.actual = actual


class SegmentTruncatedError(BadOffsetError):
    """A read below the start offset."""


class BadAttributeUpdateError(SegmentStoreError):
    """A conditional attribute update found another value than expected."""


class BadKeyVersionError(SegmentStoreError):
    """A conditional table update or removal found another key version than expected."""

    def __init__(self, segment: str, key: bytes, message: str = "") -> None:
        super().__init__(segment, message or f"key {key!r} has another version")
        self.key = key


class TableNotEmptyError(SegmentStoreError):
    pass


class ContainerNotOwnedError(SegmentStoreError):
    """The segment's container is not running on this node."""


class DataCorruptionError(SegmentStoreError):
    """Stored data that should exist cannot be read back (e.g. a Tier-2 chunk deleted
    behind the store's back). Never served as zeros."""


class StoreShutdownError(SegmentStoreError):
    """The container is stopping or stopped; retry elsewhere or later."""


class TooLargeError(SegmentStoreError):
    """An append or table entry larger than the configured maximum."""


# ---------------------------------------------------------------------------------------
# Values

#: ``AttributeUpdate.expected`` / ``TableUpdate.expected_version`` value meaning
#: "the attribute/key must not exist yet".
NOT_EXISTS = -1


@dataclass(frozen=True, slots=True)
class AttributeUpdate:
    """Set attribute ``key`` to ``value``. With ``expected`` set, only if its current value
    equals it (``NOT_EXISTS``: only if absent); otherwise the whole call fails with
    ``BadAttributeUpdateError`` and nothing (not the append either) is applied."""

    key: str
    value: int
    expected: int | None = None


@dataclass(frozen=True, slots=True)
class SegmentProperties:
    name: str
    length: int
    storage_length: int
    start_offset: int
    sealed: bool
    attributes: Mapping[str, int] = field(default_factory=dict)
    last_modified_ms: int = 0


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Bytes from ``offset``, as zero-copy slices in order (their total may be less than
    asked). Empty when a tail read timed out. ``end_of_segment`` is true when the segment
    is sealed and the read reached its end."""

    offset: int
    chunks: Sequence[memoryview]
    end_of_segment: bool = False

    @property
    def length(self) -> int:
        return sum(len(c) for c in self.chunks)


@dataclass(frozen=True, slots=True)
class TableUpdate:
    """Put ``key`` → ``value``; with ``expected_version`` set, only if the key's current
    version equals it (``NOT_EXISTS``: only if absent)."""

    key: bytes
    value: bytes
    expected_version: int | None = None


@dataclass(frozen=True, slots=True)
class TableRemoval:
    key: bytes
    expected_version: int | None = None


@dataclass(frozen=True, slots=True)
class TableEntry:
    key: bytes
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class SegmentTraffic:
    """Smoothed incoming traffic of one segment, for the auto-scaler."""

    bytes_per_second: float
    events_per_second: float


# ---------------------------------------------------------------------------------------
# The API


class SegmentStore(Protocol):
    """All containers of one node, behind one object. Every method may raise
    ``ContainerNotOwnedError`` and ``StoreShutdownError`` besides those named."""

    async def start(self) -> None:
        """Start (recover) every container this node owns."""
        ...

    async def close(self) -> None:
        """Stop accepting calls, finish what is in flight, sync and close the logs."""
        ...

    # -- segments ------------------------------------------------------------------------

    async def create_segment(
        self, name: str, attributes: Mapping[str, int] | None = None
    ) -> None:
        """Raises ``SegmentExistsError``."""
        ...

    async def append(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
    ) -> int:
        """Append ``data`` atomically; return the offset at which it starts. With
        ``expected_offset``, only if the segment's length equals it (``BadOffsetError``
        otherwise). ``attribute_updates`` apply atomically with the append.
        ``event_count`` feeds the events/s traffic figure. Raises
        ``SegmentNotFoundError``, ``SegmentSealedError``, ``BadOffsetError``,
        ``BadAttributeUpdateError``, ``TooLargeError``."""
        ...

    def append_future(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
        on_done: DoneCallback | None = None,
    ) -> asyncio.Future[int]:
        """``append``, returning its future at once; the append is queued, in call order,
        before this returns, and every error arrives through the future. For callers
        that chain a callback instead of awaiting (no task, one event-loop hop fewer).
        ``on_done(fut)``, if given, runs on the event loop once the future is done, never
        before this returns: called by the store as it completes the future where it can
        (no event-loop hop at all), else as a done callback."""
        ...

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        ...

    async def read(
        self, name: str, offset: int, max_length: int, timeout_ms: int = 0
    ) -> ReadResult:
        """Up to ``max_length`` bytes from ``offset``. At the tail of an unsealed segment,
        wait up to ``timeout_ms`` for data. Raises ``SegmentNotFoundError``,
        ``SegmentTruncatedError`` (offset below start), ``BadOffsetError`` (past the end),
        ``DataCorruptionError``."""
        ...

    async def get_info(self, name: str) -> SegmentProperties:
        ...

    async def seal(self, name: str) -> int:
        """Seal; return the final length. Sealing a sealed segment is not an error."""
        ...

    async def truncate(self, name: str, offset: int) -> None:
        """Raise the start offset to ``offset`` (``start <= offset <= length``; a lower
        offset than the current start is a ``BadOffsetError``)."""
        ...

    async def merge(self, target: str, source: str) -> int:
        """Seal ``source``, append all its bytes to ``target`` atomically and delete
        ``source``; return the offset in ``target`` where they start. Raises
        ``SegmentNotFoundError`` (either), ``SegmentSealedError`` (target sealed)."""
        ...

    async def delete_segment(self, name: str) -> None:
        ...

    def traffic(self, name: str) -> SegmentTraffic:
        """Current smoothed traffic of a segment (zeros if unknown)."""
        ...

    # -- table segments ------------------------------------------------------------------

    async def create_table(self, name: str) -> None:
        """Raises ``SegmentExistsError``."""
        ...

    async def delete_table(self, name: str, must_be_empty: bool = False) -> None:
        """Raises ``SegmentNotFoundError``, ``TableNotEmptyError``."""
        ...

    async def table_put(self, name: str, updates: Sequence[TableUpdate]) -> list[int]:
        """Apply all updates atomically; return the new version of each key. If any
        conditional update fails, nothing is applied (``BadKeyVersionError``)."""
        ...

    async def table_remove(self, name: str, removals: Sequence[TableRemoval]) -> None:
        """Remove keys atomically; a missing key with no expected version is not an error."""
        ...

    async def table_get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        ...

    async def table_entries(self, name: str, prefix: bytes = b"") -> list[TableEntry]:
        """Every entry whose key starts with ``prefix``, in key order."""
        ...
