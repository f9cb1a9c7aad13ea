"""The share-partition state machine (``gateway/share/partition.py``) with time passed in:
locks, acknowledgements, delivery counts, archiving, the window bound, and the snapshot
that survives a restart."""

from __future__ import annotations

import pytest
from tidegate.gateway.share.partition import (
    AckType,
    Acquired,
    InvalidRecordState,
    RecordState,
    SharePartition,
)

LOCK_MS = 1_000


def _sp(start: int = 0, limit: int = 3, window: int = 100) -> SharePartition:
    return SharePartition(start, lock_duration_ms=LOCK_MS, delivery_count_limit=limit,
                          record_locks_max=window)


def test_members_acquire_distinct_records() -> None:
    sp = _sp()
    assert sp.acquire("a", 0, 9, 4, now_ms=0) == [Acquired(0, 3, 1)]
    assert sp.next_candidate(0, 10) == 4
    assert sp.acquire("b", 4, 9, 100, now_ms=0) == [Acquired(4, 9, 1)]
    assert sp.next_candidate(0, 10) is None


def test_accept_moves_the_start_and_is_never_redelivered() -> None:
    sp = _sp()
    sp.acquire("a", 0, 4, 10, now_ms=0)
    sp.acknowledge("a", 0, 4, [AckType.ACCEPT])
    assert sp.start_offset == 5 and not sp.records
    assert sp.next_candidate(10 * LOCK_MS, 5) is None


def test_release_redelivers_with_a_higher_count_then_archives_at_the_limit() -> None:
    sp = _sp(limit=2)
    sp.acquire("a", 0, 0, 10, now_ms=0)
    sp.acknowledge("a", 0, 0, [AckType.RELEASE])
    assert sp.acquire("b", 0, 0, 10, now_ms=0) == [Acquired(0, 0, 2)]
    sp.acknowledge("b", 0, 0, [AckType.RELEASE])
    assert sp.start_offset == 1, "the second delivery was the last: archived"
    assert sp.next_candidate(0, 1) is None


def test_an_expired_lock_makes_the_record_available_and_the_old_holder_cannot_ack() -> None:
    sp = _sp()
    sp.acquire("a", 0, 1, 10, now_ms=0)
    assert sp.next_candidate(LOCK_MS - 1, 2) is None
    assert sp.acquire("b", 0, 1, 10, now_ms=LOCK_MS) == [Acquired(0, 1, 2)]
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", 0, 1, [AckType.ACCEPT])
    sp.acknowledge("b", 0, 1, [AckType.ACCEPT])
    assert sp.start_offset == 2


def test_per_record_types_and_gaps() -> None:
    sp = _sp()
    sp.acquire("a", 0, 3, 10, now_ms=0)
    sp.acknowledge("a", 0, 3, [AckType.ACCEPT, AckType.REJECT, AckType.RELEASE, AckType.GAP])
    assert sp.start_offset == 2
    assert sp.records[2].state is RecordState.AVAILABLE
    assert sp.records[3].state is RecordState.ARCHIVED
    with pytest.raises(ValueError):
        sp.acknowledge("a", 2, 3, [AckType.ACCEPT, AckType.ACCEPT, AckType.ACCEPT])
    with pytest.raises(ValueError):
        sp.acknowledge("a", 2, 2, [9])


def test_acknowledgement_is_all_or_nothing() -> None:
    sp = _sp()
    sp.acquire("a", 0, 1, 10, now_ms=0)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", 0, 2, [AckType.ACCEPT])
    assert sp.records[0].state is RecordState.ACQUIRED


def test_window_is_bounded() -> None:
    sp = _sp(window=3)
    assert sp.acquire("a", 0, 9, 10, now_ms=0) == [Acquired(0, 2, 1)]
    assert sp.next_candidate(0, 10) is None
    sp.acknowledge("a", 0, 0, [AckType.ACCEPT])
    assert sp.acquire("a", 3, 9, 10, now_ms=0) == [Acquired(3, 3, 1)]


def test_release_member_and_log_start() -> None:
    sp = _sp()
    sp.acquire("a", 0, 4, 10, now_ms=0)
    assert sp.release_member("a") == 5
    sp.reset_start(3)
    assert sp.start_offset == 3 and sorted(sp.records) == [3, 4]


def test_snapshot_restores_without_locks() -> None:
    sp = _sp()
    sp.acquire("a", 0, 5, 10, now_ms=0)
    sp.acknowledge("a", 1, 1, [AckType.ACCEPT])
    sp.acknowledge("a", 2, 2, [AckType.REJECT])
    start, runs = sp.snapshot()
    again = _sp()
    again.restore(start, runs)
    assert again.start_offset == 0 and again.end_offset == 6
    got = again.acquire("b", 0, 9, 10, now_ms=0)
    assert got == [Acquired(0, 0, 2), Acquired(3, 5, 2), Acquired(6, 9, 1)]
