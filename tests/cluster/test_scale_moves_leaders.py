"""A scale moves a partition's leader to another node while an idempotent acks=all
producer and a consumer group run: the partition's new segment lives in a container of
another node. Offsets stay dense, nothing acknowledged is lost or stored twice."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from tidegate.core.segmentstore.service import container_of
from tidegate.protocol.controller_grpc import pb2

from tests.cluster.clients import (
    QUIET,
    Consuming,
    Producing,
    carry_on_then_drain,
    leaders,
    read_back,
)
from tests.cluster.nodes import start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _stub, _zk_state, successor_numbers
from tests.cluster.zk import ZooKeeperServer


# Once one node names the new leader, every node does from then on: Metadata reads the
# current segment afresh (a cached one named the old leader on some node for up to 1 s).
def test_scale_moves_a_partition_to_another_node_under_load(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, leader_id = _zk_state(zookeeper.hosts)
        # Partition 0 (key 0) goes to the first new segment, which the controller puts on
        # a node other than the sealed segment's (core/controller/placement.py).
        topic = "moving-0"
        first = successor_numbers(owners, topic, 2)[0]
        before_node = owners[container_of(f"kafka/{topic}/0", CONTAINERS)]
        after_node = owners[container_of(f"kafka/{topic}/{first}", CONTAINERS)]
        assert after_node != before_node
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        deadline = time.monotonic() + 30
        while leaders(bootstrap, topic).get(0) != before_node and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leaders(bootstrap, topic).get(0) == before_node

        producing = Producing(bootstrap, topic, 1)
        consuming = Consuming(bootstrap, topic, "moving-group")
        producing.start()
        consuming.start()
        while len(producing.acked) < 300:
            time.sleep(0.05)
        leader = next(n for n in nodes if n.node_id == leader_id)
        _stub(leader).Scale(pb2.ScaleRequest(
            scope="kafka", stream=topic, sealed_segments=[0],
            new_ranges=[pb2.KeyRange(start=0.0, end=0.5), pb2.KeyRange(start=0.5, end=1.0)],
        ), timeout=30)
        at_scale = len(producing.acked)
        deadline = time.monotonic() + 30
        while leaders(bootstrap, topic).get(0) != after_node and time.monotonic() < deadline:
            time.sleep(0.2)
        if leaders(bootstrap, topic).get(0) != after_node:
            views = {n.node_id: leaders(n.bootstrap, topic) for n in nodes}
            segs = {
                n.node_id: str(_stub(n).GetSegmentForKey(
                    pb2.SegmentForKeyRequest(scope="kafka", stream=topic, key=0.0), timeout=5
                )).replace("\n", " ")
                for n in nodes
            }
            raise AssertionError(f"leader not moved to {after_node}: {views} {segs} {_zk_state(zookeeper.hosts)}")
        carry_on_then_drain(producing, consuming, at_scale + 600, deadline)

        stored = read_back(bootstrap, topic, 1)
        assert [o for _, o, _ in stored] == list(range(len(stored)))
        counts = Counter(v for _, _, v in stored)
        assert max(counts.values()) == 1
        where = {o: v for _, o, v in stored}
        missing = [a for a in producing.acked if where.get(a[1]) != a[2]]
        assert not missing, f"{len(missing)} acknowledged records not read back: {missing[:5]}"
        assert {(p, o, v) for p, o, v, _ in consuming.got} >= set(producing.acked)
    finally:
        for node in nodes:
            node.close()
