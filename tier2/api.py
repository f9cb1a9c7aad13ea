"""The Tier-2 storage contract: the final resting place of segment data.

Tier-2 is high-throughput but not necessarily low-latency. The segment store's storage
writer is its only writer; readers are the read index (cache misses) and recovery.

Contract, for every implementation:

- A segment is a sequence of bytes addressed by offsets that never shift. Truncation
  raises the start offset (data below it may be physically deleted, whole chunks at a
  time) but never renumbers what remains.
- ``write`` only appends: the offset given must equal the current length, otherwise
  ``BadOffsetError`` and nothing is written. Its data is one buffer or a sequence of
  buffers written back to back (so callers need not join them first). A write either lands whole and durably
  (data and metadata synced before it returns) or raises and leaves the segment as it was
  before the call, as far as any later ``get_info``/``read`` can see. After a crash (as
  opposed to a raise) a write that had not returned may be present in part: a prefix of
  its data, seen as a length between the old and the intended one; the writer
  reconciles by re-writing from the length ``get_info`` reports.
- ``concat`` appends a sealed source segment to the target at ``target_offset`` (which
  must equal the target's length) and deletes the source, atomically from a reader's view.
  The target must not be sealed (``SegmentSealedError``); the source must be sealed
  (``SegmentNotSealedError``) and never truncated (``BadOffsetError``); source offset
  ``x`` becomes target offset ``target_offset + x``.
- ``read(name, offset, length)`` returns exactly ``length`` bytes: the whole range must
  lie in ``[start_offset, length]`` or it raises ``BadOffsetError`` (no short reads).
- Reading a range whose bytes should exist but are missing behind the store's back
  raises ``DataMissingError``; it never returns zeros.
- ``truncate(name, offset)`` with ``offset > length`` raises ``BadOffsetError``; with
  ``offset <= start_offset`` it is a no-op (already satisfied), so retries are safe. A
  sealed segment may be truncated. ``seal`` is idempotent. ``write`` to a sealed segment
  raises ``SegmentSealedError``. ``create`` of an existing name raises
  ``SegmentExistsError``; every other call on a missing name ``SegmentNotFoundError``.
- ``list_segments`` yields every existing segment name, sorted.
- Transient failures (I/O errors that a retry may cure) surface as a plain
  ``StorageError``; the subclasses above are deterministic answers, not worth retrying.
- Calls are blocking and thread-safe per segment name; the segment store calls them from
  worker threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

#: What ``write`` takes: one buffer, or several to be written back to back.
WriteData = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]


class StorageError(Exception):
    """Base class of every Tier-2 error; carries the segment name."""

    def __init__(self, segment: str, message: str = "") -> None:
        super().__init__(f"{segment}: {message}" if message else segment)
        self.segment = segment


class SegmentNotFoundError(StorageError):
    pass


class SegmentExistsError(StorageError):
    pass


class SegmentSealedError(StorageError):
    pass


class SegmentNotSealedError(StorageError):
    """A concat whose source segment is not sealed."""


class BadOffsetError(StorageError):
    """A write or concat at an offset other than the current length, or a read/truncate
    outside ``[start_offset, length]``."""


class DataMissingError(StorageError):
    """Bytes that metadata says exist cannot be found (a chunk deleted or cut short)."""


class StorageFencedError(StorageError):
    """A write by a container owner that another owner has since replaced (a higher
    epoch claimed the container's Tier-2 fence): nothing was written, and retrying
    cannot help."""


def check_read_range(
    segment: str, offset: int, length: int, start_offset: int, segment_length: int
) -> None:
    """Raise ``BadOffsetError`` unless ``[offset, offset + length)`` is readable."""
    if length < 0 or offset < start_offset or offset + length > segment_length:
        raise BadOffsetError(
            segment,
            f"read [{offset}, {offset + length}) outside [{start_offset}, {segment_length}]",
        )


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    name: str
    length: int
    start_offset: int
    sealed: bool


class Storage(Protocol):
    def create(self, name: str) -> SegmentInfo: ...

    def exists(self, name: str) -> bool: ...

    def get_info(self, name: str) -> SegmentInfo: ...

    def write(self, name: str, offset: int, data: WriteData, *, durable: bool = True) -> None:
        """Append ``data`` at ``offset`` (the segment's length). Durable by default: the
        bytes survive a power failure once this returns. ``durable=False`` lets the
        storage return first (the bytes are readable at once); a power failure may
        then cut the segment back to a prefix of them, until a later durable write to
        the segment (an empty one only syncs), its seal or a concat of it makes them
        durable."""
        ...

    def read(self, name: str, offset: int, length: int, read_ahead_max: int | None = None) -> bytes:
        """``length`` bytes from ``offset``. ``read_ahead_max``: at most this many bytes
        after them are worth fetching ahead (the caller holds what follows), if the
        storage reads ahead at all."""
        ...

    def seal(self, name: str) -> None: ...

    def concat(self, target: str, target_offset: int, source: str) -> None: ...

    def truncate(self, name: str, offset: int) -> None: ...

    def delete(self, name: str) -> None: ...

    def list_segments(self) -> Iterator[str]: ...

    def forget_cached(self, belongs: Callable[[str], bool]) -> None:
        """Drop what this instance remembers of the segments ``belongs`` picks (their
        next call reads the store): another writer may have changed them since, as a
        node that gets a container back after another node owned it."""
        ...
