"""Leader epochs stay consistent through a scale and a ``kill -9``: while both happen,
Metadata is polled on every node, and no (partition, epoch) pair is ever answered with two
different leaders, no node's epoch of a partition ever goes back, and each partition whose
leader changed is answered with a higher epoch than before (Kafka's rule: the epoch grows
with every leader change; librdkafka keeps the leader of the highest epoch it saw)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from tidegate.core.segmentstore.service import container_of
from tidegate.protocol.controller_grpc import pb2

from tests.cluster.clients import QUIET, ask, leaders
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _stub, _zk_state, successor_numbers
from tests.cluster.zk import ZooKeeperServer

SPREAD = 6
#: (time asked, node asked, topic, partition, leader, epoch)
Seen = tuple[float, int, str, int, int, int]


class MetadataPoller(threading.Thread):
    """Asks one node for the topics' metadata until stopped; keeps every answer."""

    def __init__(self, node: Node, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.node, self.topics = node, topics
        self.seen: list[Seen] = []
        #: (time, topic, partition, error code) of partitions answered with an error
        self.errors: list[tuple[float, str, int, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in self.topics],
            allow_auto_topic_creation=False,
        )
        while not self.stopping.is_set():
            now = time.monotonic()  # when asked: an answer timed after an event was asked after it
            try:
                md = ask(self.node.port, request, 12, MetadataResponse)
            except (OSError, AssertionError):  # the killed node (refused, or closed mid-answer)
                time.sleep(0.05)
                continue
            for t in md.topics:
                for p in t.partitions:
                    if p.error_code == 0:
                        self.seen.append((now, self.node.node_id, t.name, p.partition_index,
                                          p.leader_id, p.leader_epoch))
                    else:
                        self.errors.append((now, t.name, p.partition_index, p.error_code))
            time.sleep(0.01)


def _check(seen: list[Seen]) -> None:
    named: dict[tuple[str, int, int], set[int]] = defaultdict(set)
    last: dict[tuple[int, str, int], int] = {}
    for _, node, topic, partition, leader, epoch in sorted(seen):
        named[(topic, partition, epoch)].add(leader)
        key = (node, topic, partition)
        assert epoch >= last.get(key, -1), f"node {node}: {topic}/{partition} epoch went back to {epoch}"
        last[key] = epoch
    twice = {k: v for k, v in named.items() if len(v) > 1}
    assert not twice, f"(topic, partition, epoch) answered with two leaders: {twice}"


def _lines(node: Node, words: tuple[str, ...]) -> str:
    text = node.log_path.read_text(errors="replace").splitlines()
    return "\n".join([line for line in text if any(w in line for w in words)][-60:])


def _latest(seen: list[Seen], topic: str, partition: int, after: float) -> tuple[int, int] | None:
    found = [(t, leader, epoch) for t, _, tp, p, leader, epoch in seen
             if tp == topic and p == partition and t >= after]
    return max(found)[1:] if found else None


def test_epochs_name_one_leader_through_a_scale_and_a_kill9(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS)
    pollers: list[MetadataPoller] = []
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, controller_node = _zk_state(zookeeper.hosts)
        # Partition 0 of "moving" goes to the first new segment, in another node's container.
        moving = next(
            f"moving-{i}" for i in range(1000)
            if owners[container_of(f"kafka/moving-{i}/0", CONTAINERS)]
            != owners[container_of(f"kafka/moving-{i}/{successor_numbers(owners, f'moving-{i}', 2)[0]}",
                                   CONTAINERS)]
        )
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        for name, count in ((moving, 1), ("spread", SPREAD)):
            admin.create_topics([NewTopic(name, count, 1)])[name].result(30)
        deadline = time.monotonic() + 30
        while (len(leaders(bootstrap, "spread")) < SPREAD or not leaders(bootstrap, moving)) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        pollers = [MetadataPoller(n, [moving, "spread"]) for n in nodes]
        for poller in pollers:
            poller.start()
        time.sleep(0.5)
        before_scale = time.monotonic()
        _stub(next(n for n in nodes if n.node_id == controller_node)).Scale(pb2.ScaleRequest(
            scope="kafka", stream=moving, sealed_segments=[0],
            new_ranges=[pb2.KeyRange(start=0.0, end=0.5), pb2.KeyRange(start=0.5, end=1.0)],
        ), timeout=30)
        scaled = time.monotonic()
        first = successor_numbers(owners, moving, 2)[0]  # the placement's number for keys [0, 0.5)
        after_node = owners[container_of(f"kafka/{moving}/{first}", CONTAINERS)]
        # Every node answers Metadata afresh: its first answer after the scale names the new leader.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and \
                any(_latest(p.seen, moving, 0, scaled) is None for p in pollers):
            time.sleep(0.1)
        after = {p.node.node_id: _latest(p.seen, moving, 0, scaled) for p in pollers}
        all_seen = [s for p in pollers for s in p.seen]
        old = _latest([s for s in all_seen if s[0] < before_scale], moving, 0, 0)
        new = _latest(all_seen, moving, 0, scaled)
        if old is None or new is None or any(a is None or a[0] != after_node for a in after.values()):
            errors = [(p.node.node_id, e) for p in pollers for e in p.errors
                      if e[1] == moving and e[0] >= before_scale]
            logs = "\n".join(f"node {n.node_id}:\n{_lines(n, (moving, 'WARN', 'ERROR'))}" for n in nodes)
            raise AssertionError(
                f"{moving}/0 led by {old} before the scale; after it each node answered {after}, "
                f"expected node {after_node}; errors answered: {errors[:5]} ({len(errors)})\n{logs}"
            )
        assert new[1] > old[1], f"a scale moved the leader {old} -> {new}, the epoch did not grow"

        lead = leaders(bootstrap, "spread")
        victim = next(n for n in nodes if n.node_id in lead.values() and n.node_id != controller_node)
        before_kill = time.monotonic()
        victim.kill9()
        deadline = time.monotonic() + 60
        moved = [p for p, node in lead.items() if node == victim.node_id]
        survivors = [p for p in pollers if p.node is not victim]
        while time.monotonic() < deadline:
            seen = [s for p in survivors for s in p.seen]
            now = [_latest(seen, "spread", p, time.monotonic() - 0.5) for p in moved]
            if all(x is not None and x[0] != victim.node_id for x in now):
                break
            time.sleep(0.2)
        time.sleep(0.5)
        for poller in pollers:
            poller.stopping.set()
            poller.join(15)
        all_seen = [s for p in pollers for s in p.seen]
        _check(all_seen)
        for p in moved:
            old = _latest([s for s in all_seen if s[0] < before_kill], "spread", p, 0)
            new = _latest([s for s in all_seen if s[1] != victim.node_id], "spread", p, before_kill)
            assert old is not None and new is not None, (p, old, new)
            assert new[0] != victim.node_id, f"spread/{p} still led by the killed node: {new}"
            assert new[1] > old[1], f"spread/{p}: leader {old} -> {new}, the epoch did not grow"
    finally:
        for poller in pollers:
            poller.stopping.set()
        for node in nodes:
            node.close()
