"""The campaign's checker on read-backs made up to hold each violation it must report (no
cluster: what it reads back is given), and on a clean one, which it must pass."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.chaos.checker import (
    Report,
    Stored,
    check_faults,
    check_group,
    check_idempotent,
    check_logs,
    check_transactions,
    unavailability,
)
from tests.cluster.chaos.faults import Fault
from tests.cluster.chaos.workloads import Ack, OffsetsWatch, Seen, Transaction


def _acks(values: list[tuple[int, int | None, str]]) -> list[Ack]:
    return [Ack(p, o, v.encode(), 0.0, 0.0) for p, o, v in values]


def _both(records: dict[int, list[tuple[int, str]]]) -> dict[str, dict[int, Stored]]:
    stored = {p: Stored([(o, v.encode()) for o, v in rs], len(rs) and rs[-1][0] + 1, True)
              for p, rs in records.items()}
    return {"read_uncommitted": stored, "read_committed": stored}


def test_a_clean_read_back_passes() -> None:
    report = Report()
    acks = _acks([(0, 0, "p1-0"), (1, 0, "p1-1"), (0, 1, "p1-2")])
    check_idempotent(report, "t", acks, _both({0: [(0, "p1-0"), (1, "p1-2")], 1: [(0, "p1-1")]}))
    assert not report.violations, report.text()


def test_an_acknowledgement_without_offset_is_found_by_value() -> None:
    """librdkafka acknowledges a batch it learnt was stored only from a later batch's
    acknowledgement with no offset (seen in a 50-fault campaign at a SIGSTOP)."""
    report = Report()
    acks = _acks([(0, 0, "p1-0"), (0, None, "p1-2"), (0, None, "p1-4")])
    check_idempotent(report, "t", acks, _both({0: [(0, "p1-0"), (1, "p1-2")], 1: [(0, "p1-4")]}))
    found = "\n".join(report.violations)
    assert "lost or moved" in found and "p1-4" in found and "p1-2" not in found, found


def test_lost_duplicate_gap_and_reorder_are_reported() -> None:
    report = Report()
    acks = _acks([(0, 0, "p1-0"), (0, 1, "p1-2"), (0, 2, "p1-4")])
    check_idempotent(report, "t", acks, _both({0: [(0, "p1-0"), (1, "p1-4"), (3, "p1-2"), (4, "p1-2")]}))
    found = "\n".join(report.violations)
    for kind in ("lost or moved", "duplicates", "gaps", "reorders"):
        assert kind in found, found


def test_aborted_visible_committed_missing_and_half_transactions_are_reported() -> None:
    report = Report()
    txns = [
        Transaction(0, [(0, b"tx-0-0"), (1, b"tx-0-1")], "committed"),
        Transaction(1, [(0, b"tx-1-0")], "aborted"),
        Transaction(2, [(0, b"tx-2-0"), (1, b"tx-2-1")], "unknown"),
    ]
    check_transactions(report, "tx", txns, _both({0: [(0, "tx-0-0"), (2, "tx-1-0"), (4, "tx-2-0")]}))
    found = "\n".join(report.violations)
    for kind in ("aborted records visible", "committed records missing", "partly visible"):
        assert kind in found, found


def test_group_offsets_backwards_and_aborted_consumed_are_reported() -> None:
    report = Report()
    watch = OffsetsWatch(backwards=[("01:02:03.456", "t", 0, 10, 1, 4, 2)])
    check_group(report, [Seen("tx", 0, 2, b"tx-1-0")], {"t": {b"p1-0"}}, {b"tx-1-0"}, watch)
    found = "\n".join(report.violations)
    for kind in ("aborted records consumed", "never consumed", "going backwards"):
        assert kind in found, found


def test_a_backwards_read_a_member_committed_itself_is_a_note_not_a_violation() -> None:
    report = Report()
    back = ("01:02:03.456", "t", 0, 10, 1, 4, 2)
    # The member's commit of 4 was answered after its commit of 10: its own doing.
    check_group(report, [], {}, set(), OffsetsWatch(backwards=[back]), [("t", 0, 10), ("t", 0, 4)])
    assert not report.violations, report.violations
    assert any("re-sent an older commit" in n for n in report.notes), report.notes
    report = Report()
    check_group(report, [], {}, set(), OffsetsWatch(backwards=[back]), [("t", 0, 4), ("t", 0, 10)])
    assert any("going backwards" in v for v in report.violations), report.violations


def test_unavailability_is_measured_from_the_fault_to_a_new_acknowledgement() -> None:
    fault = Fault("kill9", 1.0, 0, node_id=2, started_at=100.0)
    acks = [Ack(0, 0, b"a", 99.0, 101.0), Ack(0, 1, b"b", 100.5, 112.0), Ack(1, 0, b"c", 100.2, 100.4)]
    gaps = unavailability([fault], acks, 2, end=200.0)
    assert {p: round(g, 3) for p, g in gaps[0].items()} == {0: 12.0, 1: 0.4}
    report = Report()
    check_faults(report, [fault], gaps, unavailable_max_s=10.0)
    assert len(report.violations) == 1 and "{0: 12.0}" in report.violations[0], report.violations


def test_unavailability_counts_a_second_stop_before_the_next_fault() -> None:
    # Partition 0 acked again at once, then stopped 11 s while its container moved back.
    first, second = (Fault("kill9", 1.0, 0, node_id=2, started_at=t) for t in (100.0, 150.0))
    acks = [Ack(0, 0, b"a", 100.5, 101.0), Ack(0, 1, b"b", 120.0, 131.0),
            Ack(0, 2, b"c", 149.0, 155.0), Ack(0, 3, b"d", 150.2, 150.4)]
    gaps = unavailability([first, second], acks, 1, end=200.0)
    assert [round(g[0], 3) for g in gaps] == [11.0, 5.0]


def test_errors_and_tracebacks_in_a_log_are_reported(tmp_path: Path) -> None:
    log = tmp_path / "node-1.log"
    log.write_text(
        "2026-01-01 00:00:00,000 INFO x: fine\n"
        "2026-01-01 00:00:01,000 ERROR x: it broke\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "ValueError: bad\n"
    )
    report = Report()
    check_logs(report, [log])
    assert any("ERROR x: it broke" in v for v in report.violations), report.violations
    assert any("traceback: ValueError: bad" in v for v in report.violations), report.violations
