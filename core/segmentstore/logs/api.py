"""The Tier-1 durable data log contract.

A durable data log is an append-only sequence of opaque entries (the durable log writes
serialized data frames into it). It is written by exactly one owner at a time (the
container's durable log) and read only during recovery.

Contract, for every implementation:

- ``append`` returns an awaitable that completes with the entry's address once the entry
  is durable (on local disk: written and ``fdatasync``ed). Completions happen in append
  order. If an append is completed, all appends prior to it have also completed. If an
  append fails, all subsequent appends fail and the log closes (``DataLogClosedError``).
- Implementations group-commit: one sync covers every entry written before it, and many
  appends may be in flight at once. The number of bytes in flight is bounded
  (``max_in_flight_bytes``); ``append`` waits for room rather than growing memory.
- ``open`` fences out any earlier owner (increments and durably records an epoch) and
  discards a torn last entry (detected by its length and CRC), so a later ``read`` yields
  exactly the entries whose appends could have been acknowledged, in order.
- ``truncate(address)`` discards every entry strictly before ``address``; a crash during
  truncation leaves either the old or the new start, never a gap.
- Addresses are totally ordered: ``(file/ledger id, position)``, compared as tuples.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


class DataLogError(Exception):
    pass


class DataLogClosedError(DataLogError):
    """The log was closed (explicitly or after a failed append); nothing more is accepted."""


class DataLogCorruptError(DataLogError):
    """An entry before the tail fails its CRC: the log cannot be trusted past it."""


class DataLogFencedError(DataLogError):
    """Another owner opened the log with a newer epoch."""


@dataclass(frozen=True, slots=True, order=True)
class LogAddress:
    """Where an entry lives: which log file (or ledger) and its sequence within the log."""

    file_id: int
    position: int


class DurableDataLog(Protocol):
    @property
    def epoch(self) -> int: ...

    async def open(self) -> None: ...

    async def append(self, entry: bytes | memoryview) -> LogAddress: ...

    def read(self, start: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, bytes]]:
        """Entries from ``start`` (or the first kept entry) to the end, in order."""
        ...

    async def truncate(self, upto: LogAddress) -> None: ...

    async def close(self) -> None: ...
