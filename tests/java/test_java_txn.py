"""kafka-clients 4.3.0 (Java) transactions against ``tidegate serve``: commit, abort,
fencing, both isolation levels, and the Admin's transaction views (KIP-664)."""

from __future__ import annotations

from tests.clients.server import Tidegate
from tests.java.conftest import Java


def test_java_transactions(java: Java, tidegate_groups: Tidegate) -> None:
    out = java.run("AdminScenarios", tidegate_groups.bootstrap, "topics", "jtx", "1")
    assert "OK topics" in out, out
    out = java.run("TxnScenario", tidegate_groups.bootstrap, "jtx")
    assert "OK txn" in out, out
    assert "listed 1 Ongoing" in out, out
    assert "described Ongoing [jtx-0]" in out, out
    # c-0..4 at 0-4, a marker at 5, a-0..2 at 6-8, a marker at 9: "open" is at 10.
    assert "producers 1 txnStart=10" in out, out
    assert "fenced" in out, out
    assert "read_committed c-0,c-1,c-2,c-3,c-4,new" in out, out
    assert "read_uncommitted c-0,c-1,c-2,c-3,c-4,a-0,a-1,a-2,open,new" in out, out
    # Both positions pass the last marker (offset 13): control batches are skipped.
    assert "position read_committed 14" in out and "position read_uncommitted 14" in out, out
