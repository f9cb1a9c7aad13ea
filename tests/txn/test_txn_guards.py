"""The partition leader's transaction guards (gateway/log/txn_guards.py): a marker
appended for a producer drops its guard, so a batch verified before the marker is
refused when its offsets are assigned after it; memory stays bounded."""

from __future__ import annotations

from pathlib import Path

from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.txn_guards import TxnGuards


def test_a_marker_drops_the_guard_verified_before_it(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "index")
    try:
        states = ProducerStates(index)
        guards = states.txn_guards
        guard = guards.guard("t", 0, 7, 3)
        assert not guards.holds("t", 0, 7, guard)  # not verified yet
        guard.verified = True  # the coordinator answered
        assert guards.holds("t", 0, 7, guard)
        assert guards.guard("t", 0, 7, 3) is guard  # the next batch needs no call
        states.end_transaction("t", 0, 7, 3)  # the abort marker is appended
        assert not guards.holds("t", 0, 7, guard)
        again = guards.guard("t", 0, 7, 3)
        assert again is not guard and not again.verified  # verified afresh
        assert guards.guard("t", 0, 7, 4) is not again  # another epoch, another guard
        other = guards.guard("t", 1, 7, 3)
        other.verified = True
        states.forget_topic("t")
        assert not guards.holds("t", 1, 7, other)
    finally:
        index.close()


def test_guards_are_bounded() -> None:
    guards = TxnGuards(entries_max=3)
    first = guards.guard("t", 0, 1, 0)
    first.verified = True
    for pid in range(2, 6):
        guards.guard("t", 0, pid, 0).verified = True
    assert not guards.holds("t", 0, 1, first)  # evicted: verified again if it comes back
    assert len(guards) == 3
