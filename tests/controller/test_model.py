"""The state machine table, key-space arithmetic and record encodings."""

from __future__ import annotations

import math

import pytest
from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    KeyRange,
    SegmentRecord,
    StreamConfig,
    StreamState,
    segment_id,
)
from tidegate.core.controller.keyspace import equal_cover, is_cover, split
from tidegate.core.controller.records import (
    TruncationRecord,
    config_from_json,
    config_to_json,
    dumps,
    epoch_from_json,
    epoch_to_json,
    loads,
)
from tidegate.core.controller.state import TRANSITIONS, allowed, check_transition

S = StreamState


def test_transition_table() -> None:
    assert set(TRANSITIONS) == set(StreamState)
    expected = {
        (S.CREATING, S.ACTIVE),
        (S.ACTIVE, S.UPDATING),
        (S.ACTIVE, S.SCALING),
        (S.ACTIVE, S.TRUNCATING),
        (S.ACTIVE, S.SEALING),
        (S.ACTIVE, S.SEALED),
        (S.UPDATING, S.ACTIVE),
        (S.SCALING, S.ACTIVE),
        (S.TRUNCATING, S.ACTIVE),
        (S.SEALING, S.SEALED),
        (S.SEALED, S.DELETING),
    }
    for a in StreamState:
        for b in StreamState:
            ok = a == b or (a, b) in expected
            assert allowed(a, b) == ok, (a, b)
            if ok:
                check_transition("s/t", a, b)
            else:
                with pytest.raises(ConflictError, match=f"{a.value}.*{b.value}"):
                    check_transition("s/t", a, b)


def test_segment_ids() -> None:
    s = SegmentRecord(segment_id(7, 3), 0, 0.0, 1.0)
    assert (s.epoch, s.number) == (7, 3)
    assert segment_id(2**31, 2**32 - 1) == (2**31 << 32) | (2**32 - 1)


def test_split_bounds_are_exact() -> None:
    for start, end, n in [(0.0, 1.0, 3), (0.1, 0.7, 7), (1 / 3, 2 / 3, 2), (0.0, 1.0, 1)]:
        parts = split(start, end, n)
        assert parts[0].start == start and parts[-1].end == end
        assert all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))
        assert len(parts) == n
    # a range too narrow to split yields fewer parts, never empty ones
    tiny = math.nextafter(0.5, 1.0)
    assert split(0.5, tiny, 4) == [KeyRange(0.5, tiny)]
    for n in (1, 2, 3, 10, 1000):
        assert is_cover(equal_cover(n)) and len(equal_cover(n)) == n


def test_records_round_trip() -> None:
    e = EpochRecord(3, 12345, (SegmentRecord(segment_id(3, 9), 12345, 0.1, 1 / 3),))
    assert epoch_from_json(loads(dumps(epoch_to_json(e)))) == e
    c = StreamConfig(tags=("a", "b"))
    assert config_from_json(loads(dumps(config_to_json(c)))) == c
    t = TruncationRecord({1: 2, 3: 4}, 6)
    assert TruncationRecord.from_json(loads(dumps(t.to_json()))) == t
