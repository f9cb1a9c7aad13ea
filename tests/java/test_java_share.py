"""Share groups (KIP-932) with kafka-clients 4.3's ``KafkaShareConsumer`` against a real
``tidegate serve``: records shared by members of one group, RELEASE, REJECT, lock expiry
after a consumer's ``kill -9``, and a server ``kill -9`` in the middle."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.server import Tidegate
from tests.java.conftest import Java

TS_BASE = 1_700_000_000_000
#: Short locks so an expired lock shows within a test (Kafka's default is 30 s).
LOCK_MS = 4_000


@pytest.fixture
def tidegate_share(tmp_path: Path) -> Iterator[Tidegate]:
    config = tmp_path / "tidegate.toml"
    config.write_text(f"[share]\nrecord_lock_duration_ms = {LOCK_MS}\n")
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    server.start()
    try:
        yield server
    finally:
        server.close()


class _Consumer:
    """One ShareScenarios consume process; its output goes to a file read as it runs."""

    def __init__(self, java: Java, server: Tidegate, tmp: Path, name: str, group: str,
                 topic: str, mode: str, idle_ms: int = 4_000, max_ms: int = 60_000,
                 stop: Path | None = None) -> None:
        self.log = tmp / f"{name}.out"
        self._file = open(self.log, "w")
        self.proc = java.popen("ShareScenarios", server.bootstrap, "consume", group, topic, mode,
                               str(idle_ms), str(max_ms), *([str(stop)] if stop else []),
                               stdout=self._file)

    def text(self) -> str:
        return self.log.read_text()

    def records(self) -> list[tuple[int, int, str, str]]:
        """(offset, delivery count, value, acknowledgement) of every record given."""
        out = []
        for line in self.text().splitlines():
            if line.startswith("R "):
                _, _, offset, count, value, ack = line.split()
                out.append((int(offset), int(count), value, ack))
        return out

    def finish(self, timeout_s: float = 90) -> str:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._file.close()
        return self.text()

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._file.close()


def _wait(cond: object, timeout_s: float, what: str, detail: object = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}: {detail() if callable(detail) else ''}")


def _setup(java: Java, server: Tidegate, topic: str, group: str, count: int) -> None:
    java.run("AdminScenarios", server.bootstrap, "topics", topic, "1")
    out = java.run("ShareScenarios", server.bootstrap, "config", group,
                   "share.auto.offset.reset", "earliest")
    assert "OK config" in out, out
    out = java.run("ProducerScenario", server.bootstrap, topic, str(count), "1", str(TS_BASE))
    assert f"OK produce {count}" in out, out


def test_two_share_consumers_split_one_partition(java: Java, tidegate_share: Tidegate,
                                                  tmp_path: Path) -> None:
    server = tidegate_share
    _setup(java, server, "sh-two", "g-two", 200)
    a = _Consumer(java, server, tmp_path, "a", "g-two", "sh-two", "accept")
    b = _Consumer(java, server, tmp_path, "b", "g-two", "sh-two", "accept")
    out_a, out_b = a.finish(), b.finish()
    assert "OK consume" in out_a and "OK consume" in out_b, out_a + out_b
    got_a = [r[2] for r in a.records()]
    got_b = [r[2] for r in b.records()]
    assert not set(got_a) & set(got_b), "a record went to both members"
    assert sorted(got_a + got_b) == sorted(f"v-{i}" for i in range(200))
    assert len(got_a + got_b) == 200, "a record was delivered twice"
    assert got_a and got_b, f"one member got nothing: a={len(got_a)} b={len(got_b)}"


def test_release_redelivers_with_a_higher_delivery_count(java: Java, tidegate_share: Tidegate,
                                                         tmp_path: Path) -> None:
    server = tidegate_share
    _setup(java, server, "sh-rel", "g-rel", 20)
    c = _Consumer(java, server, tmp_path, "c", "g-rel", "sh-rel", "release-first")
    out = c.finish()
    assert "OK consume" in out, out
    seen: dict[str, list[int]] = {}
    for _, count, value, _ in c.records():
        seen.setdefault(value, []).append(count)
    assert seen == {f"v-{i}": [1, 2] for i in range(20)}, seen


def test_delivery_count_limit_archives(java: Java, tidegate_share: Tidegate,
                                       tmp_path: Path) -> None:
    """Released at every delivery: given 5 times (group.share.delivery.count.limit), then
    archived and never given again."""
    server = tidegate_share
    _setup(java, server, "sh-lim", "g-lim", 4)
    c = _Consumer(java, server, tmp_path, "c", "g-lim", "sh-lim", "release")
    out = c.finish()
    assert "OK consume" in out, out
    seen: dict[str, list[int]] = {}
    for _, count, value, _ in c.records():
        seen.setdefault(value, []).append(count)
    assert seen == {f"v-{i}": [1, 2, 3, 4, 5] for i in range(4)}, seen


def test_reject_archives(java: Java, tidegate_share: Tidegate, tmp_path: Path) -> None:
    server = tidegate_share
    _setup(java, server, "sh-rej", "g-rej", 30)
    c = _Consumer(java, server, tmp_path, "c", "g-rej", "sh-rej", "reject-odd")
    out = c.finish()
    assert "OK consume" in out, out
    assert sorted(r[2] for r in c.records()) == sorted(f"v-{i}" for i in range(30)), out
    # Everything was accepted or rejected: a later member of the group gets nothing.
    d = _Consumer(java, server, tmp_path, "d", "g-rej", "sh-rej", "accept", max_ms=8_000)
    out = d.finish()
    assert "OK consume n=0" in out, out


def test_killed_consumers_records_come_back_after_the_lock(java: Java, tidegate_share: Tidegate,
                                                           tmp_path: Path) -> None:
    server = tidegate_share
    _setup(java, server, "sh-kill", "g-kill", 30)
    holder = _Consumer(java, server, tmp_path, "holder", "g-kill", "sh-kill", "hold")
    _wait(lambda: "HOLDING" in holder.text(), 60, "the holder's first records", holder.text)
    held = {r[2] for r in holder.records()}
    holder.kill9()
    c = _Consumer(java, server, tmp_path, "c", "g-kill", "sh-kill", "accept",
                  idle_ms=LOCK_MS + 4_000)
    out = c.finish()
    assert "OK consume" in out, out
    got = {r[2]: r[1] for r in c.records()}
    assert sorted(got) == sorted(f"v-{i}" for i in range(30)), out
    assert held and all(got[v] >= 2 for v in held), (held, got)


def test_server_kill9_in_the_middle(java: Java, tidegate_share: Tidegate, tmp_path: Path) -> None:
    """Nothing lost, and nothing whose acknowledgement was committed is given again."""
    server = tidegate_share
    count = 150
    _setup(java, server, "sh-crash", "g-crash", count)
    stop = tmp_path / "stop"
    c = _Consumer(java, server, tmp_path, "c", "g-crash", "sh-crash", "accept", max_ms=170_000,
                  stop=stop)
    _wait(lambda: sum(1 for ln in c.text().splitlines() if ln.startswith("C ")) >= 5, 60,
          "some committed acknowledgements", c.text)
    server.kill9()
    server.start()
    every = {f"v-{i}" for i in range(count)}
    _wait(lambda: {r[2] for r in c.records()} >= every, 120, "every record", c.text)
    time.sleep(LOCK_MS / 1000 + 2)  # a redelivery would come within a lock's time
    stop.touch()
    out = c.finish(60)
    assert "OK consume" in out, out
    committed_at: dict[int, int] = {}
    order = 0
    for line in out.splitlines():
        order += 1
        if line.startswith("C "):
            for offset in line[2:].split(","):
                committed_at.setdefault(int(offset), order)
        elif line.startswith("R "):
            offset = int(line.split()[2])
            assert offset not in committed_at, f"offset {offset} given again after its commit"
    values = {r[2] for r in c.records()}
    assert values == {f"v-{i}" for i in range(count)}, out


def test_admin_lists_describes_offsets_and_deletes(java: Java, tidegate_share: Tidegate,
                                                   tmp_path: Path) -> None:
    server = tidegate_share
    _setup(java, server, "sh-adm", "g-adm", 20)
    stop = tmp_path / "stop"
    c = _Consumer(java, server, tmp_path, "c", "g-adm", "sh-adm", "accept", stop=stop)
    try:
        _wait(lambda: len({r[2] for r in c.records()}) == 20
              and c.text().rstrip().endswith(",19"), 60, "every record committed", c.text)
        out = java.run("ShareScenarios", server.bootstrap, "admin", "g-adm")
        assert "GROUP g-adm Share Stable" in out, out
        assert "DESCRIBE g-adm Stable members=1" in out and "sh-adm-0" in out, out
        assert "OFFSET sh-adm-0 start=20 lag=0" in out, out
    finally:
        stop.touch()
        c.finish()
    out = java.run("ShareScenarios", server.bootstrap, "delete", "g-adm")
    assert "OK delete" in out, out
