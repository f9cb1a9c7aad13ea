"""A consumer group's committed offsets across the loss of the group coordinator's node.

A fault campaign saw a group's committed offsets, as kafka-python's admin client read
them, go back by up to 130 offsets soon after the coordinator's node was lost. Here a
group of two confluent-kafka members consumes and auto-commits while an idempotent
producer writes; the coordinator's node is frozen past its ZooKeeper session and thawed,
or killed with -9 and started again, while a reader asks for the group's offsets as the
campaign does (``list_group_offsets``, with the node that answered). Every read must show
the latest commit acknowledged before it was sent, or one acknowledged since, and the last
read, after the members left, each partition's last acknowledged commit.

What the campaign saw is the members' own doing, reproduced here after a kill -9: an
OffsetCommit librdkafka had in flight to the dying coordinator is retried, and sent to the
new one after the newer commits it deferred meanwhile; the coordinator (Kafka's too) keeps
what it is sent last, so the committed offset goes back with nothing lost. A read going
back is therefore reported only with the members' commits that explain it."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.chaos.workloads import GroupOffsetsWatcher, wall_clock
from tests.cluster.clients import QUIET, Producing, coordinator, wait_for
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer

pytestmark = pytest.mark.timeout(360)

TOPIC, GROUP, PARTITIONS = "committed", "committing-group", 6
#: Longer than the nodes' ZooKeeper session (``zookeeper_session_timeout_ms``), so the
#: frozen node's containers, the groups' among them, move to the others.
FREEZE_S = 13.0


@dataclass
class Commit:
    acked_at: float
    partition: int
    offset: int


@dataclass
class Read:
    sent_at: float
    wall: str
    node: int
    offsets: dict[int, int]


class Member(threading.Thread):
    """A group member auto-committing every 500 ms; keeps every commit the coordinator
    acknowledged (``on_commit`` without an error) and what it consumed."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.commits: list[Commit] = []
        self.errors: list[str] = []
        self.got: list[tuple[int, int, float]] = []
        self.stopping = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 2000, "on_commit": self._committed, **QUIET,
        })
        self.consumer.subscribe([TOPIC])

    def _committed(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        now = time.monotonic()
        for tp in partitions:
            if err is None and tp.error is None and tp.offset >= 0:
                self.commits.append(Commit(now, tp.partition, tp.offset))

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(f"{wall_clock()} {msg.error()}")
                    continue
                self.got.append((msg.partition(), msg.offset(), time.monotonic()))
            # Its last positions, committed and acknowledged before it leaves.
            with contextlib.suppress(KafkaException):  # nothing new to commit
                self._committed(None, self.consumer.commit(asynchronous=False) or [])
        finally:
            self.consumer.close()


def _read_offsets(bootstrap: str, reads: Any, stopping: Any) -> None:
    """The reader's loop, in a child process: kafka-python leaves the sockets of its
    refused connects to a killed node unclosed, which pytest would report as errors."""
    watcher = GroupOffsetsWatcher(bootstrap, GROUP)
    while True:
        sent_at = time.monotonic()  # the same clock as the parent's
        try:
            node, found = watcher._read()
        except Exception:  # noqa: BLE001 - a coordinator away: read again
            reads.put(None)
            watcher.close()
        else:
            offsets = {tp.partition: c.offset for tp, c in found.items()
                       if tp.topic == TOPIC and c.offset >= 0}
            reads.put(Read(sent_at, wall_clock(), node, offsets))
        if stopping.is_set():  # set during the wait: one more read, after it
            break
        stopping.wait(0.5)
    watcher.close()


class Reader:
    """Reads the group's committed offsets every 500 ms, as the campaign's watcher; the
    last read is made after ``stop``."""

    def __init__(self, bootstrap: str) -> None:
        mp = multiprocessing.get_context("spawn")
        self._queue, self._stopping = mp.Queue(), mp.Event()
        self._proc = mp.Process(target=_read_offsets, args=(bootstrap, self._queue, self._stopping),
                                daemon=True)
        self.reads: list[Read] = []
        self.failed = 0

    def start(self) -> None:
        self._proc.start()

    def _take(self, timeout_s: float) -> bool:
        try:
            read = self._queue.get(timeout=timeout_s)
        except Empty:
            return False
        if read is None:
            self.failed += 1
        else:
            self.reads.append(read)
        return True

    def drain(self) -> None:
        while self._take(0):
            pass

    def stop(self) -> None:
        self._stopping.set()
        deadline = time.monotonic() + 30
        while self._proc.is_alive() and time.monotonic() < deadline:
            self._take(0.2)
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self.drain()
        self._queue.close()
        self._queue.join_thread()


def _backwards(reads: list[Read]) -> list[str]:
    last: dict[int, Read] = {}
    found = []
    for r in reads:
        for p, o in r.offsets.items():
            before = last.get(p)
            if before is not None and o < before.offsets[p]:
                found.append(f"partition {p}: {before.offsets[p]} (node {before.node} at {before.wall}) "
                             f"then {o} (node {r.node} at {r.wall})")
            last[p] = r
    return found


def _unexplained(reads: list[Read], commits: list[Commit]) -> list[str]:
    """Reads that show neither the latest commit acknowledged before they were sent nor
    one acknowledged since: an acknowledged commit lost, or a value nobody committed.
    (A lower value acknowledged later is the member's own doing: librdkafka re-sends an
    OffsetCommit that was in flight when the coordinator died after newer ones, and a
    coordinator, Kafka's too, stores what it is sent last.)"""
    commits = sorted(commits, key=lambda c: c.acked_at)
    found = []
    for r in reads:
        for p, o in r.offsets.items():
            mine = [c for c in commits if c.partition == p]
            before = [c.offset for c in mine if c.acked_at < r.sent_at]
            allowed = {c.offset for c in mine if c.acked_at >= r.sent_at}
            if before:
                allowed.add(before[-1])
            if o not in allowed:
                found.append(f"partition {p}: {o} read from node {r.node} at {r.wall}, "
                             f"{before[-1] if before else None} acknowledged last before")
    return found


def _commits_back(commits: list[Commit]) -> list[str]:
    """Acknowledged commits lower than an earlier one of the same partition (a member
    that went back itself: what the coordinator stores then is what Kafka would store)."""
    top: dict[int, int] = {}
    found = []
    for c in sorted(commits, key=lambda c: c.acked_at):
        if c.offset < top.get(c.partition, -1):
            found.append(f"partition {c.partition}: {c.offset} after {top[c.partition]}")
        top[c.partition] = max(top.get(c.partition, -1), c.offset)
    return found


def _consumed_back(members: list[Member]) -> list[str]:
    """Where a member read a partition again from a lower offset (a rebalance or a reset)."""
    found = []
    for i, m in enumerate(members):
        top: dict[int, int] = {}
        for p, o, _ in m.got:
            if o <= top.get(p, -1):
                found.append(f"member {i} partition {p}: {o} after {top[p]}")
            top[p] = o
    return found


def _coordinator_of(nodes: list[Node], exclude: int = -1) -> int:
    for n in nodes:
        if n.node_id == exclude:
            continue
        found = coordinator(n.port, GROUP, 0)
        if found > 0 and found != exclude:
            return found
    return 0


@pytest.mark.parametrize("fault", ["sigstop", "kill9"])
def test_every_acknowledged_commit_is_read_when_the_coordinators_node_is_lost(
    tmp_path: Path, zookeeper: ZooKeeperServer, fault: str
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    frozen: Node | None = None
    threads: list[Any] = []
    reader: Reader | None = None
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        producing = Producing(bootstrap, TOPIC, PARTITIONS, rate_per_s=200)
        members = [Member(bootstrap), Member(bootstrap)]
        reader = Reader(bootstrap)
        threads = [producing, *members]
        for t in threads:
            t.start()
        reader.start()

        def committed() -> list[Commit]:
            return [c for m in members for c in m.commits]

        wait_for("commits of every partition",
                 lambda: len({c.partition for c in committed()}) == PARTITIONS, 90)
        by_id = {n.node_id: n for n in nodes}
        old = by_id[wait_for("the group's coordinator", lambda: _coordinator_of(nodes))]
        time.sleep(3)  # commits and reads on the old coordinator
        assert old.proc is not None
        faulted_at = time.monotonic()
        if fault == "sigstop":
            os.kill(old.proc.pid, signal.SIGSTOP)
            frozen = old
        else:
            old.kill9()
        others = [n for n in nodes if n is not old]
        new = wait_for("another coordinator", lambda: _coordinator_of(others, exclude=old.node_id), 60)
        left = faulted_at + FREEZE_S - time.monotonic()
        if left > 0:
            time.sleep(left)
        if frozen is not None:
            os.kill(old.proc.pid, signal.SIGCONT)
            frozen = None
        else:
            old.start()
        back_at = time.monotonic()
        top_before = {}
        for c in committed():
            if c.acked_at < faulted_at:
                top_before[c.partition] = max(top_before.get(c.partition, -1), c.offset)
        wait_for("every partition committed past where it was before the fault", lambda: all(
            any(c.partition == p and c.offset > o and c.acked_at > back_at for c in committed())
            for p, o in top_before.items()), 120)
        time.sleep(3)  # reads after the thaw or restart
        producing.stopping.set()
        for m in members:
            m.stopping.set()
        for t in (producing, *members):
            t.join(60)
        reader.stop()  # its last read: the offsets the members committed as they left
        reads, failed, reader = reader.reads, reader.failed, None

        commits = committed()
        where = f"(coordinator {old.node_id} then {new}; logs in {tmp_path})"
        assert len(reads) > 10, f"{len(reads)} reads, {failed} failed"
        assert {r.node for r in reads if r.sent_at > back_at} - {old.node_id}, where
        unexplained = _unexplained(reads, commits)
        assert not unexplained, (
            f"{where}\nreads no acknowledged commit explains: {unexplained[:8]}\n"
            f"reads going back: {_backwards(reads)[:8]}\n"
            f"members' own commits going back: {_commits_back(commits)[:8]}\n"
            f"members reading again: {_consumed_back(members)[:8]}\n"
            f"members' errors: {[e for m in members for e in m.errors][:8]}")
        # Every acknowledged commit survives: the last read, after the members left,
        # holds each partition's last acknowledged commit.
        last = {c.partition: c.offset for c in sorted(commits, key=lambda c: c.acked_at)}
        assert reads[-1].offsets == last, (where, reads[-1], last)
    finally:
        for t in threads:
            t.stopping.set()
        if reader is not None:
            reader.stop()
        if frozen is not None and frozen.proc is not None:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        for node in nodes:
            node.close()
