"""One share-partition: which records of a topic partition a share group has in flight
(KIP-932's ``SharePartition``), as a pure state machine with the time passed in.

The window runs from the start offset (SPSO: every record below it is done, acknowledged
or archived) to the end offset (SPEO: no record at or past it was ever acquired). Inside
it each offset is one of:

- AVAILABLE: may be acquired (released, or its lock expired);
- ACQUIRED: locked by one member until ``lock_deadline_ms``;
- ACKNOWLEDGED (accepted) or ARCHIVED (rejected, a gap, or past the delivery-count
  limit): done, never delivered again.

Acquiring counts a delivery; a record released or whose lock expires after its
``delivery_count_limit``-th delivery is archived instead of becoming available. The start
offset moves over done records at the head, so the window holds at most
``record_locks_max`` offsets (Kafka's ``group.share.partition.max.record.locks``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass


class RecordState(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge ``AcknowledgeTypes`` values."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


class InvalidRecordState(Exception):
    """An acknowledgement of records this member does not hold (INVALID_RECORD_STATE)."""


class SharePartition:
    def __init__(self, start_offset: int, *, lock_duration_ms: int, delivery_count_limit: int,
                 record_locks_max: int) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.record_locks_max = record_locks_max
        #: Offsets in [start_offset, end_offset) by offset (a missing one was archived).
        self.records: dict[int, InFlight] = {}

    # -- reading the state ---------------------------------------------------------------

    def next_candidate(self, now_ms: int, high_watermark: int) -> int | None:
        """The lowest offset an acquire could hand out now, or None."""
        self.expire(now_ms)
        for offset in range(self.start_offset, self.end_offset):
            r = self.records.get(offset)
            if r is not None and r.state is RecordState.AVAILABLE:
                return offset
        if self.end_offset < high_watermark and self._room() > 0:
            return self.end_offset
        return None

    def next_deadline_ms(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values()
                     if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def in_flight(self) -> int:
        return sum(1 for r in self.records.values() if r.state is not RecordState.ARCHIVED)

    def _room(self) -> int:
        return self.record_locks_max - (self.end_offset - self.start_offset)

    # -- changing it ---------------------------------------------------------------------

    def reset_start(self, log_start_offset: int) -> None:
        """Records below the log start offset are gone (retention, DeleteRecords)."""
        if log_start_offset > self.start_offset:
            for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
                self.records.pop(offset, None)
            self.start_offset = log_start_offset
            self.end_offset = max(self.end_offset, log_start_offset)

    def expire(self, now_ms: int) -> None:
        for r in self.records.values():
            if r.state is RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms:
                self._release(r)

    def acquire(self, member_id: str, first: int, last: int, max_records: int,
                now_ms: int) -> list[Acquired]:
        """Lock for ``member_id`` what may be acquired in [first, last] (the offsets the
        read covered), at most ``max_records``; the ranges with their delivery counts."""
        self.expire(now_ms)
        taken: list[tuple[int, int]] = []
        deadline = now_ms + self.lock_duration_ms
        for offset in range(max(first, self.start_offset), min(last + 1, self.end_offset)):
            if len(taken) >= max_records:
                break
            r = self.records.get(offset)
            if r is not None and r.state is RecordState.AVAILABLE:
                r.state, r.member_id, r.lock_deadline_ms = RecordState.ACQUIRED, member_id, deadline
                r.delivery_count += 1
                taken.append((offset, r.delivery_count))
        if first <= self.end_offset:
            while (self.end_offset <= last and len(taken) < max_records and self._room() > 0):
                self.records[self.end_offset] = InFlight(RecordState.ACQUIRED, 1, member_id, deadline)
                taken.append((self.end_offset, 1))
                self.end_offset += 1
        return list(_ranges(taken))

    def acknowledge(self, member_id: str, first: int, last: int, types: list[int]) -> None:
        """Apply one acknowledgement batch (all or nothing): one type for every offset,
        or one per offset. Raises ``InvalidRecordState`` or ``ValueError``."""
        if last < first or (len(types) != 1 and len(types) != last - first + 1):
            raise ValueError(f"acknowledgement batch {first}-{last} with {len(types)} types")
        kinds = []
        for t in types:
            try:
                kinds.append(AckType(t))
            except ValueError:
                raise ValueError(f"unknown acknowledge type {t}") from None
        held = []
        for offset in range(first, last + 1):
            r = self.records.get(offset)
            if r is None or r.state is not RecordState.ACQUIRED or r.member_id != member_id:
                raise InvalidRecordState(f"offset {offset} is not acquired by this member")
            held.append(r)
        for i, r in enumerate(held):
            kind = kinds[0] if len(kinds) == 1 else kinds[i]
            if kind is AckType.ACCEPT:
                r.state, r.member_id = RecordState.ACKNOWLEDGED, None
            elif kind in (AckType.REJECT, AckType.GAP):
                r.state, r.member_id = RecordState.ARCHIVED, None
            elif kind is AckType.RELEASE:
                self._release(r)
            else:  # RENEW: the member keeps the record for another lock duration
                r.lock_deadline_ms += self.lock_duration_ms
        self._advance()

    def release_member(self, member_id: str) -> int:
        """A member left or closed its session: its records become available again."""
        n = 0
        for r in self.records.values():
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                self._release(r)
                n += 1
        return n

    def _release(self, r: InFlight) -> None:
        r.member_id, r.lock_deadline_ms = None, 0
        r.state = (RecordState.ARCHIVED if r.delivery_count >= self.delivery_count_limit
                   else RecordState.AVAILABLE)
        if r.state is RecordState.ARCHIVED:
            self._advance()

    def _advance(self) -> None:
        while self.start_offset < self.end_offset:
            r = self.records.get(self.start_offset)
            if r is not None and r.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                return
            self.records.pop(self.start_offset, None)
            self.start_offset += 1

    # -- what survives a restart ---------------------------------------------------------

    def snapshot(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """The start offset and the window as (first, last, state, delivery count) runs;
        acquired records are stored as available (locks do not survive a restart)."""
        runs: list[tuple[int, int, int, int]] = []
        for offset in range(self.start_offset, self.end_offset):
            r = self.records.get(offset)
            state = RecordState.ARCHIVED if r is None else r.state
            if state is RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            count = 0 if r is None else r.delivery_count
            if runs and runs[-1][1] == offset - 1 and runs[-1][2:] == (state, count):
                runs[-1] = (runs[-1][0], offset, state, count)
            else:
                runs.append((offset, offset, int(state), count))
        return self.start_offset, runs

    def restore(self, start_offset: int, runs: list[tuple[int, int, int, int]]) -> None:
        self.start_offset = self.end_offset = start_offset
        self.records = {}
        for first, last, state, count in runs:
            for offset in range(first, last + 1):
                self.records[offset] = InFlight(RecordState(state), count)
            self.end_offset = max(self.end_offset, last + 1)
        self._advance()


def _ranges(taken: list[tuple[int, int]]) -> Iterator[Acquired]:
    """Consecutive offsets with one delivery count as one range."""
    start = prev = count = -1
    for offset, c in sorted(taken):
        if start >= 0 and offset == prev + 1 and c == count:
            prev = offset
            continue
        if start >= 0:
            yield Acquired(start, prev, count)
        start = prev = offset
        count = c
    if start >= 0:
        yield Acquired(start, prev, count)
