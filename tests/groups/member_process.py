"""A consumer-group member running as a process (``member.py`` or the Java
``GroupConsumer``), read back through the lines it prints, for the end-to-end group
tests (``test_mixed_clients.py``, ``test_consumer_protocol.py``)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tests.clients.server import Tidegate
from tests.java.conftest import Java

REPO = Path(__file__).resolve().parents[2]


class Member:
    def __init__(
        self, name: str, client: str, jvm: Java, server: Tidegate, tmp: Path, topic: str,
        group: str, assignor: str, *extra: str,
    ) -> None:
        self.name = name
        self.client = client
        self.stop_file = tmp / f"{name}.stop"
        self.log = tmp / f"{name}.out"
        self._out: IO[str] = open(self.log, "w")
        args = [server.bootstrap, topic, group, str(self.stop_file), assignor, *extra]
        self.proc: subprocess.Popen[str]
        if client == "java":
            self.proc = jvm.popen("GroupConsumer", *args, stdout=self._out)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.groups.member", client, *args],
                cwd=REPO, stdout=self._out, stderr=subprocess.STDOUT, text=True,
            )
        self.killed = False

    def lines(self, kind: str) -> list[tuple[int, int]]:
        out = []
        for line in self.log.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == kind:
                out.append((int(parts[1]), int(parts[2])))
        return out

    def assignment(self) -> set[int] | None:
        last = [ln for ln in self.log.read_text().splitlines() if ln.startswith("A ")]
        return None if not last else {int(x) for x in last[-1][2:].split(",") if x}

    def stop(self) -> None:
        self.stop_file.write_text("stop")

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.killed = True

    def finish(self, timeout_s: float = 60) -> str:
        if not self.killed:
            self.stop()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        return self.log.read_text()


def wait_for(
    cond: Callable[[], bool], what: str, detail: Callable[[], object], timeout_s: float
) -> float:
    """Seconds until ``cond()``; fails with ``detail()`` after ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if cond():
            return time.monotonic() - start
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}: {detail()}")


class GroupRun:
    """What a group test produced (acknowledged (partition, offset)s) and its members'
    deliveries: exactly once means every produced record delivered, except those a
    member read and was killed before printing its acknowledged commit."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.produced: set[tuple[int, int]] = set()
        self.members: list[Member] = []

    def produce(self, count: int, seconds: float) -> None:
        """``count`` records spread over ``seconds``, every one acknowledged."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        errors: list[object] = []

        def report(err: object, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                self.produced.add((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

        for i in range(count):
            key = f"k{len(self.produced)}-{i}".encode()
            producer.produce(self.topic, key=key, value=b"v", on_delivery=report)
            producer.poll(0)
            time.sleep(seconds / count)
        assert producer.flush(30) == 0 and not errors, errors

    def add(self, member: Member) -> Member:
        self.members.append(member)
        return member

    def delivered(self) -> list[tuple[int, int]]:
        return [r for m in self.members for r in m.lines("D")]

    def check_committed_at_ends(self, group: str, partitions: int) -> None:
        """The group's committed offsets are each partition's end: all was consumed."""
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        committed = admin.list_group_offsets(group)[group]
        admin.close()
        ends = {p: max(o for q, o in self.produced if q == p) + 1 for p in range(partitions)}
        assert {tp.partition: om.offset for tp, om in committed.items()} == ends

    def all_delivered(self) -> bool:
        missing = self.produced - set(self.delivered())
        read_by_killed = {r for m in self.members if m.killed for r in m.lines("R")}
        return not (missing - read_by_killed)
