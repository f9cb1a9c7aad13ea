"""StreamCut arithmetic over a stream of 10,000 segments does work in proportion to the
segments, not to their pairs: retention runs it for every stream every round on the event
loop (issue 35, item 9: with pairwise comparisons one round over a 10,000-partition topic
stopped the loop for about a second, over 42,000 partitions for 15 s)."""

from __future__ import annotations

import pytest
from tidegate.core.controller import history
from tidegate.core.controller.api import EpochRecord, SegmentRecord

N = 10_000


def epoch(number: int, count: int) -> EpochRecord:
    segs = tuple(
        SegmentRecord((number << 32) | (number * count + i), 0, i / count, (i + 1) / count)
        for i in range(count)
    )
    return EpochRecord(number, 0, segs)


@pytest.fixture
def overlaps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the key-range comparisons the arithmetic makes."""
    calls = [0]
    real = history._overlap

    def counted(a: SegmentRecord, b: SegmentRecord) -> bool:
        calls[0] += 1
        return real(a, b)

    monkeypatch.setattr(history, "_overlap", counted)
    return calls


def test_cut_arithmetic_is_linear_in_segments(overlaps: list[int]) -> None:
    # epoch 1 merges pairs of epoch 0's segments; epoch 2 splits them back
    h = history.History([epoch(0, N), epoch(1, N // 2), epoch(2, N)])
    head = {s.id: 0 for s in h.epochs[0].segments}
    middle = {s.id: 7 for s in h.epochs[1].segments}
    tail = {s.id: 3 for s in h.epochs[2].segments}
    size = {s: 10 for s in h.segments}.__getitem__

    h.check_cut(middle)
    h.check_cut(tail)
    assert h.cut_ge(tail, head) and h.cut_ge(tail, middle) and not h.cut_ge(middle, tail)
    assert h.bytes_before(head, size) == 0
    assert h.bytes_before(middle, size) == N * 10 + (N // 2) * 7
    assert h.bytes_between(tail, middle, size) == (N // 2) * 3 + N * 3
    assert h.before(tail) == {s.id for e in h.epochs[:2] for s in e.segments}
    assert h.before(head) == set()
    # pairwise comparisons would be ~10^8; a sweep makes a few per segment and call
    assert overlaps[0] < 40 * len(h.segments)
