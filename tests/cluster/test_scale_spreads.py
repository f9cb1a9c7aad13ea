"""A scale splits one hot segment holding all six partitions of a topic into three: the
successors land on containers of three different nodes (the controller chooses their
numbers, ``core/controller/placement.py``), so the partitions' leaders spread over the
cluster while an idempotent acks=all producer and a consumer group run; offsets stay
dense, nothing acknowledged is lost or stored twice."""

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
from tests.cluster.test_leader_scale import CONTAINERS, _stub, _zk_state
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 6
# Partition points (bit reversal): 0, .5, .25, .75, .125, .625; three ranges of two each.
RANGES = [(0.0, 0.1875), (0.1875, 0.5625), (0.5625, 1.0)]
PAIRS = [(0, 4), (2, 1), (5, 3)]
ONE_SEGMENT = {
    "tidegate.scaling.type": "BY_RATE_IN_EVENTS_PER_SEC",
    "tidegate.scaling.target.rate": "1000000",  # the auto-scaler never acts on its own
    "tidegate.scaling.scale.factor": "2",
    "tidegate.scaling.min.segments": "1",
}


def test_a_split_hot_segment_spreads_its_partitions_over_the_nodes(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, leader_id = _zk_state(zookeeper.hosts)
        # A name whose successors numbered one after another (1, 2, 3: a hash's spread)
        # would share a node, so the spread below is the controller's doing.
        topic = next(
            f"spread-{i}" for i in range(1000)
            if len({owners[container_of(f"kafka/spread-{i}/{n}", CONTAINERS)] for n in (1, 2, 3)}) < 3
        )
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=ONE_SEGMENT)])[topic].result(30)
        deadline = time.monotonic() + 30
        while len(leaders(bootstrap, topic)) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.2)
        before = leaders(bootstrap, topic)
        assert len(set(before.values())) == 1, f"one segment, one leader: {before}"

        producing = Producing(bootstrap, topic, PARTITIONS)
        consuming = Consuming(bootstrap, topic, "spread-group")
        producing.start()
        consuming.start()
        while len(producing.acked) < 300:
            time.sleep(0.05)
        leader = next(n for n in nodes if n.node_id == leader_id)
        _stub(leader).Scale(pb2.ScaleRequest(
            scope="kafka", stream=topic, sealed_segments=[0],
            new_ranges=[pb2.KeyRange(start=a, end=b) for a, b in RANGES],
        ), timeout=30)
        at_scale = len(producing.acked)
        deadline = time.monotonic() + 30
        after = leaders(bootstrap, topic)
        while (len(set(after.values())) < 3 or len(after) < PARTITIONS) and time.monotonic() < deadline:
            time.sleep(0.2)
            after = leaders(bootstrap, topic)
        assert len(set(after.values())) == 3, f"successors' leaders not on three nodes: {after}"
        assert all(after[a] == after[b] for a, b in PAIRS), after

        carry_on_then_drain(producing, consuming, at_scale + 600, deadline)
        # In-flight appends on the old leader are answered NOT_LEADER_OR_FOLLOWER at once
        # (they waited for the produce's timeout, re-sent to a segment of another node).
        assert producing.latency_max_s < 10, f"an ack took {producing.latency_max_s:.1f} s"

        stored = read_back(bootstrap, topic, PARTITIONS)
        for p in range(PARTITIONS):
            offsets = [o for q, o, _ in stored if q == p]
            assert offsets == list(range(len(offsets))), f"partition {p} offsets not dense"
        counts = Counter(v for _, _, v in stored)
        assert max(counts.values()) == 1, "a record stored twice"
        where = {(p, o): v for p, o, v in stored}
        missing = [a for a in producing.acked if where.get(a[:2]) != a[2]]
        assert not missing, f"{len(missing)} acknowledged records not read back: {missing[:5]}"
        got = [(p, o, v) for p, o, v, _ in consuming.got]
        assert set(got) >= set(producing.acked)
        assert len(got) == len(set(got)), "the consumer read records again"
    finally:
        for node in nodes:
            node.close()
