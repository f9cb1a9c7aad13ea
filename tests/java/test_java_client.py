"""kafka-clients 4.3.0 (Java) against a real ``tidegate serve``: AdminClient, the
idempotent producer, a consumer group of three and an assign/seek/poll consumer."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.clients.server import Tidegate
from tests.java.conftest import Java

TS_BASE = 1_700_000_000_000


def _create(java: Java, server: Tidegate, topic: str, partitions: int) -> str:
    return java.run("AdminScenarios", server.bootstrap, "topics", topic, str(partitions))


def _produce(java: Java, server: Tidegate, topic: str, count: int, partitions: int) -> list[tuple[int, int]]:
    out = java.run("ProducerScenario", server.bootstrap, topic, str(count), str(partitions), str(TS_BASE))
    assert f"OK produce {count}" in out, out
    return [(int(p), int(o)) for _, p, o, _ in (line.split() for line in out.splitlines() if line.startswith("P "))]


def test_admin_topics_cluster_producer_assign_consumer(java: Java, tidegate_groups: Tidegate) -> None:
    out = _create(java, tidegate_groups, "jv", 3)
    assert "OK topics" in out and "nodes=1" in out, out
    acked = _produce(java, tidegate_groups, "jv", 60, 3)
    per_partition = {p: sorted(o for q, o in acked if q == p) for p in range(3)}
    assert per_partition == {p: list(range(20)) for p in range(3)}
    out = java.run("AssignConsumer", tidegate_groups.bootstrap, "jv", "3", "60")
    assert "OK assign read=60 reread=10" in out, out


def test_admin_list_offsets_both_isolation_levels(java: Java, tidegate_groups: Tidegate) -> None:
    _create(java, tidegate_groups, "jv-ts", 1)
    _produce(java, tidegate_groups, "jv-ts", 10, 1)
    out = java.run("AdminScenarios", tidegate_groups.bootstrap, "offsets", "jv-ts", "10", str(TS_BASE))
    assert "read_committed earliest=0 latest=10 ts=3" in out, out
    assert "read_uncommitted earliest=0 latest=10 ts=3" in out, out


def test_admin_describe_configs(java: Java, tidegate_groups: Tidegate) -> None:
    _create(java, tidegate_groups, "jv-cfg", 1)
    out = java.run("AdminScenarios", tidegate_groups.bootstrap, "configs", "jv-cfg")
    assert "OK configs" in out, out


def test_admin_delete_records(java: Java, tidegate_groups: Tidegate) -> None:
    _create(java, tidegate_groups, "jv-del", 1)
    _produce(java, tidegate_groups, "jv-del", 10, 1)
    out = java.run("AdminScenarios", tidegate_groups.bootstrap, "delete-records", "jv-del", "4")
    assert "OK delete-records" in out, out


class _Member:
    """One GroupConsumer process; its output goes to a file the test reads as it runs."""

    def __init__(self, java: Java, server: Tidegate, tmp: Path, name: str, topic: str,
                 group: str, stop: Path, assignor: str, *extra: str) -> None:
        self.log = tmp / f"{name}.out"
        self._file = open(self.log, "w")
        self.proc = java.popen(
            "GroupConsumer", server.bootstrap, topic, group, str(stop), assignor, *extra,
            stdout=self._file,
        )

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def records(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for _, p, o, *_ in (ln.split() for ln in self.lines() if ln.startswith("R "))]

    def assignment(self) -> set[int] | None:
        last = [ln for ln in self.lines() if ln.startswith("A ")]
        if not last:
            return None
        return {int(x) for x in last[-1][2:].split(",") if x}

    def finish(self, timeout_s: float = 60) -> str:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._file.close()
        return self.log.read_text()


def _wait(cond: object, timeout_s: float, what: str, detail: object = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}: {detail() if callable(detail) else ''}")


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_consumer_group_of_three_and_group_admin(
    java: Java, tidegate_groups: Tidegate, tmp_path: Path, assignor: str
) -> None:
    server = tidegate_groups
    _create(java, server, "jv-grp", 3)
    expected = set(_produce(java, server, "jv-grp", 60, 3))
    stop = tmp_path / "stop"
    members = [
        _Member(java, server, tmp_path, f"m{i}", "jv-grp", "jgroup", stop, assignor) for i in range(3)
    ]
    try:
        def settled() -> bool:
            got = [m.assignment() for m in members]
            return all(a is not None and len(a) == 1 for a in got) and set().union(*got) == {0, 1, 2}  # type: ignore[arg-type]

        _wait(settled, 90, "three members with one partition each", lambda: [m.assignment() for m in members])
        # More records while the group is stable: each member reads its own partition.
        expected |= set(_produce(java, server, "jv-grp", 30, 3))

        def everything() -> bool:
            return {r for m in members for r in m.records()} >= expected

        _wait(everything, 60, "every record consumed", lambda: len({r for m in members for r in m.records()}))
        out = java.run("AdminScenarios", server.bootstrap, "groups", "jgroup", "jv-grp", "3")
        assert f"state=Stable members=3 assignor={assignor}" in out, out
        assert "committed total 90" in out, out
        assert "listGroups jgroup Classic Stable protocol=consumer" in out, out
    finally:
        stop.write_text("stop")
        outputs = [m.finish() for m in members]
    for o in outputs:
        assert "OK closed" in o, o
    consumed = [r for m in members for r in m.records()]
    assert len(consumed) == len(set(consumed)), "a record was consumed twice"
    assert set(consumed) == expected
    # After the members left: the group is Empty; admin commits with metadata
    # round-trip, and deleteConsumerGroups removes it.
    out = java.run("AdminScenarios", server.bootstrap, "groups", "jgroup", "jv-grp", "3")
    assert "state=Empty members=0" in out and "altered, read back and deleted jgroup" in out, out


def _generations(server: Tidegate, group: str) -> int:
    return server.tail(10_000).count(f"group {group!r} generation")


def test_static_member_restarts_without_a_rebalance(java: Java, tidegate_groups: Tidegate, tmp_path: Path) -> None:
    """group.instance.id: a static member that is killed and comes back within its
    session timeout takes its old place and partition; the group does not rebalance."""
    server = tidegate_groups
    _create(java, server, "jv-static", 2)
    stop = tmp_path / "stop"
    first = [
        _Member(java, server, tmp_path, f"s{i}", "jv-static", "jstatic", stop, "range", f"inst-{i}")
        for i in range(2)
    ]
    members = list(first)
    try:
        _wait(lambda: all(m.assignment() is not None and len(m.assignment() or ()) == 1 for m in first),
              60, "two static members with one partition each", lambda: [m.assignment() for m in first])
        before = _generations(server, "jstatic")
        owned = first[0].assignment()
        first[0].proc.kill()
        first[0].proc.wait()
        again = _Member(java, server, tmp_path, "s0-again", "jv-static", "jstatic", stop, "range", "inst-0")
        members.append(again)
        _wait(lambda: again.assignment() is not None, 30, "the restarted member's assignment",
              lambda: again.lines()[-5:])
        assert again.assignment() == owned
        expected = set(_produce(java, server, "jv-static", 20, 2))
        _wait(lambda: {r for m in members for r in m.records()} >= expected, 30, "records after the restart",
              lambda: len({r for m in members for r in m.records()}))
        assert _generations(server, "jstatic") == before, server.tail()
        assert [ln for ln in first[1].lines() if ln.startswith("A ")] == [f"A {sorted(first[1].assignment() or ())[0]},"]
    finally:
        stop.write_text("stop")
        for m in members:
            m.finish()
