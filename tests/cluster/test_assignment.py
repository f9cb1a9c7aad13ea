"""The container assignment is balanced, sticky and total."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tidegate.core.cluster.assignment import assign, moves


@given(
    count=st.integers(1, 64),
    before=st.dictionaries(st.integers(0, 63), st.integers(0, 6)),
    live=st.sets(st.integers(0, 6), min_size=1),
)
def test_balanced_total_and_sticky(count: int, before: dict[int, int], live: set[int]) -> None:
    after = assign(before, count, live)
    assert sorted(after) == list(range(count))
    assert set(after.values()) <= live
    loads = [sum(1 for n in after.values() if n == node) for node in live]
    assert max(loads) - min(loads) <= 1
    # Sticky: a container whose owner is live keeps it unless that owner is over quota.
    quota = -(-count // len(live))
    for cid, owner in before.items():
        if cid < count and owner in live and after[cid] != owner:
            assert sum(1 for c, n in before.items() if c < count and n == owner) > quota - 1


def test_join_and_leave_move_only_what_they_must() -> None:
    three = assign({}, 12, [1, 2, 3])
    four = assign(three, 12, [1, 2, 3, 4])
    assert moves(three, four) == 3
    assert assign(four, 12, [1, 2, 3, 4]) == four
    two = assign(three, 12, [1, 3])
    assert moves(three, two) == 4
    assert all(two[c] == three[c] for c in two if three[c] != 2)


def test_no_live_nodes() -> None:
    assert assign({0: 1}, 4, []) == {}
