"""The Tier-1 durable data log contract.

A durable data log is an append-only sequence of opaque entries (the durable log writes
serialized data frames into it). It is written by exactly one owner at a time (the
container's durable log) and read only during recovery.

Contract, for every implementation:

- ``append`` returns an awaitable that completes with the entry's address once the entry
  is durable; ``append_future`` is the same append returning its future at once (every
  error, even a refusal, arrives through the future), for callers that chain a callback
  instead of awaiting (one event-loop hop and one task fewer per entry) (on local disk:
  written and ``fdatasync``ed). Its ``on_done(fut)``, if given, runs on the event loop
  once the future is done, never before ``append_future`` returns: called by the log
  right after it completes the future where it can (no event-loop hop;
  ``callbacks.call_now``), else as a done callback. Completions happen in append order.
  If an append is completed, all appends prior to it have also completed. If an append
  fails, all subsequent appends fail and the log closes (``DataLogClosedError``).
- Append order is the order of the ``append`` calls themselves: an entry takes its place
  in the log before the coroutine first suspends, so ``asyncio.ensure_future(log.append(a))``
  followed by ``log.append(b)`` puts ``a`` before ``b``. The caller must not mutate the
  entry's buffer until its append completes (implementations avoid copying it).
- Implementations group-commit: one sync covers every entry written before it, and many
  appends may be in flight at once. The number of bytes in flight is bounded
  (``in_flight_bytes_max``): entries beyond the bound wait, in order, rather than being
  handed to the writer; a single entry larger than the bound is admitted alone.
- ``open`` fences out any earlier owner (increments and durably records an epoch) and
  discards a torn last entry (detected by its length and CRC), so a later ``read`` yields
  exactly the entries whose appends could have been acknowledged, in order. An entry
  that fails its CRC but is followed by valid entries is not a torn tail: ``open``
  raises ``DataLogCorruptError``. An earlier owner's next append after being fenced
  fails with ``DataLogFencedError`` (and its log closes); until then it may still
  complete appends it had already made durable.
- ``read(start)`` yields ``(address, entry)`` for every kept entry with address
  ``>= start``; call it after ``open`` (recovery) and before new appends.
- ``truncate(address)`` discards every entry strictly before ``address`` (which need not
  be an entry's address); a crash during truncation leaves either the old or the new
  start, never a gap. Implementations may keep entries below ``address`` physically
  (whole files are deleted), but ``read`` never yields them.
- ``close`` completes (makes durable) every append already made, then refuses new ones
  with ``DataLogClosedError``. It is idempotent.
- Addresses are totally ordered: ``(file/ledger id, position)``, compared as tuples.
  ``position`` is implementation-defined (a byte offset in a file, an index in a
  ledger); only the order is meaningful to callers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidegate.core.segmentstore.callbacks import DoneCallback


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


#: An entry: one buffer, or parts written back to back as one entry (no join needed).
Entry = bytes | memoryview | Sequence[bytes | memoryview]
#: An entry read back: its payload, possibly a slice of a larger read buffer.
EntryData = bytes | memoryview


class DurableDataLog(Protocol):
    @property
    def epoch(self) -> int: ...

    async def open(self) -> None: ...

    async def append(self, entry: Entry) -> LogAddress: ...

    def append_future(
        self, entry: Entry, on_done: DoneCallback | None = None
    ) -> asyncio.Future[LogAddress]: ...

    def read(self, start: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, EntryData]]:
        """Entries from ``start`` (or the first kept entry) to the end, in order."""
        ...

    async def truncate(self, upto: LogAddress) -> None: ...

    async def close(self) -> None: ...
