"""A node that loses the groups' container stops coordinating at once, as the map change
is seen, not when it gets round to following the change. A fault campaign froze the
group coordinator's node past its ZooKeeper session; thawed, it went on answering
OffsetFetch from its groups' state for another 13 s while another node coordinated
(and moved the group's offsets on), and a reader saw committed offsets go backwards.

Here the frozen coordinator's follow-up of the change is held (the ``cluster.on_owned``
failpoint) so the window stays open: a node that no longer coordinates must answer
NOT_COORDINATOR, never the offsets it held."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from tidegate.protocol.errors import ErrorCode

from tests.cluster.clients import QUIET, ask, coordinator, wait_for
from tests.cluster.nodes import Node, start_together
from tests.cluster.zk import ZooKeeperServer

GROUP, TOPIC = "moving-offsets", "offsets-topic"
STALL_MS = 120_000


def _commit(port: int, offset: int) -> int:
    part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")
    req = OffsetCommitRequest(
        group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[part])])
    return int(ask(port, req, 2, OffsetCommitResponse).topics[0].partitions[0].error_code)


def _fetch(port: int) -> tuple[int, int]:
    """(error, committed offset) as this one node answers."""
    req = OffsetFetchRequest(group_id=GROUP, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
    found = ask(port, req, 7, OffsetFetchResponse)
    if found.error_code:
        return int(found.error_code), -1
    part = found.topics[0].partitions[0]
    return int(part.error_code), int(part.committed_offset)


def _committed_once(nodes: list[Node]) -> tuple[dict[int, Node], Node]:
    """The topic made, offset 10 committed: the nodes by id, and the group's coordinator."""
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    by_id = {n.node_id: n for n in nodes}
    old = by_id[wait_for("a group coordinator", lambda: max(coordinator(nodes[0].port, GROUP, 0), 0))]
    wait_for("a commit on the coordinator", lambda: _commit(old.port, 10) == ErrorCode.NONE)
    return by_id, old


def test_a_thawed_coordinator_that_lost_the_groups_stops_answering_for_them(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = [Node(tmp_path, i + 1, zookeeper.hosts, 6) for i in range(3)]
    for node in nodes:
        node.env["TIDEGATE_FAILPOINTS"] = f"cluster.on_owned={STALL_MS}"
    start_together(nodes)
    frozen = None
    try:
        by_id, old = _committed_once(nodes)
        assert _fetch(old.port) == (ErrorCode.NONE, 10)

        assert old.proc is not None
        old.proc.send_signal(signal.SIGUSR2)  # its next follow-up of a map change is held
        os.kill(old.proc.pid, signal.SIGSTOP)
        frozen = old
        others = [n for n in nodes if n is not old]
        new = by_id[wait_for("another coordinator", lambda: next(
            (c for c in [coordinator(others[0].port, GROUP, 0)] if c > 0 and c != old.node_id), 0))]
        wait_for("a commit on the new coordinator", lambda: _commit(new.port, 20) == ErrorCode.NONE)
        os.kill(old.proc.pid, signal.SIGCONT)
        frozen = None
        wait_for("the thawed node to see its session lost",
                 lambda: b"the ZooKeeper session was lost" in old.log_path.read_bytes())
        wait_for("its follow-up held",
                 lambda: b"failpoint cluster.on_owned: waiting up to" in old.log_path.read_bytes())
        # Before, it answered (NONE, 10) here until the failpoint let it go on.
        assert _fetch(old.port)[0] == ErrorCode.NOT_COORDINATOR
        assert _fetch(new.port) == (ErrorCode.NONE, 20)
    finally:
        if frozen is not None and frozen.proc is not None:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        for node in nodes:
            node.close()


def test_a_commit_held_on_a_coordinator_that_lost_the_groups_is_not_stored_by_the_next(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    """A commit whose write was on its way when the coordinator's node froze must not
    land, after the thaw, in the table of the node that coordinates since: the new
    coordinator never sees it in memory (its answer would not show it) and the next one
    to load the table would go back to it. Kafka's coordinator, no longer leading its
    offsets partition, answers NOT_COORDINATOR; before, the write went on through the
    routing store to the new owner and the commit was answered NONE."""
    nodes = [Node(tmp_path, i + 1, zookeeper.hosts, 6) for i in range(3)]
    for node in nodes:
        node.env["TIDEGATE_FAILPOINTS"] = f"groups.write={STALL_MS}"
    start_together(nodes)
    frozen = None
    try:
        by_id, old = _committed_once(nodes)

        assert old.proc is not None
        old.proc.send_signal(signal.SIGUSR2)  # its next group write is held
        held: list[int] = []

        def commit_held() -> None:
            part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=20, committed_leader_epoch=-1, committed_metadata="")
            req = OffsetCommitRequest(
                group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                retention_time_ms=-1,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[part])])
            found = ask(old.port, req, 2, OffsetCommitResponse, STALL_MS / 1000)
            held.append(int(found.topics[0].partitions[0].error_code))

        committing = threading.Thread(target=commit_held, daemon=True)
        committing.start()
        wait_for("the commit's write held",
                 lambda: b"failpoint groups.write: waiting up to" in old.log_path.read_bytes())
        os.kill(old.proc.pid, signal.SIGSTOP)
        frozen = old
        others = [n for n in nodes if n is not old]
        new = by_id[wait_for("another coordinator", lambda: next(
            (c for c in [coordinator(others[0].port, GROUP, 0)] if c > 0 and c != old.node_id), 0))]
        wait_for("a commit on the new coordinator", lambda: _commit(new.port, 30) == ErrorCode.NONE)
        os.kill(old.proc.pid, signal.SIGCONT)
        frozen = None
        wait_for("the thawed node to see its session lost",
                 lambda: b"the ZooKeeper session was lost" in old.log_path.read_bytes())
        old.proc.send_signal(signal.SIGUSR2)  # the held write goes on
        committing.join(60)
        assert held and held[0] != ErrorCode.NONE, held  # before: NONE
        assert _fetch(new.port) == (ErrorCode.NONE, 30)

        # The next coordinator loads the table: it holds the last acknowledged commit.
        new.kill9()
        rest = [n for n in nodes if n is not new]
        wait_for("a third coordinator", lambda: next(
            (c for c in [coordinator(rest[0].port, GROUP, 0)] if c > 0 and c != new.node_id), 0), 90)

        def third_answer() -> tuple[int, int] | None:
            # Asked again each time: the thawed node's map may still be catching up.
            c = coordinator(rest[0].port, GROUP, 0)
            found = _fetch(by_id[c].port) if c > 0 and c != new.node_id else None
            return found if found is not None and found[0] == ErrorCode.NONE else None

        answer = wait_for("the third coordinator's answer", third_answer, 90)
        assert answer == (ErrorCode.NONE, 30)  # before: 20, the held commit
    finally:
        if frozen is not None and frozen.proc is not None:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        for node in nodes:
            node.close()
