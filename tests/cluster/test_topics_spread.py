"""A new topic's partitions are led by every node of a cluster: the controller numbers a
stream's first segments so that their containers' owners spread over the nodes
(``core/controller/placement.py``), as it does a scale's successors.

Three nodes of two containers each; topics of 3, 6 and 12 partitions created with
confluent-kafka's AdminClient and one auto-created (``num.partitions`` 6); Metadata (``list_topics``) must name every node leader of
at least ``partitions // 3`` partitions of each: with three nodes owning two containers
each the placement can always give each node exactly a third, and a bound any weaker
would let two nodes lead a 3-partition topic. The names are picked so that the hash
alone (segments numbered 0, 1, 2, ...) would leave a node below that bound. A stream
created through a follower's gRPC goes the same way, and a topic raised from 3 to 6
partitions (CreatePartitions, split by a scale) keeps the bound."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import grpc
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from tidegate.core.controller.api import qualified_segment_name
from tidegate.core.segmentstore.service import container_of
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.cluster.clients import QUIET, leaders
from tests.cluster.nodes import start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _zk_state
from tests.cluster.zk import ZooKeeperServer

COUNTS = (3, 6, 12)
NODES = (1, 2, 3)


def _hash_alone_is_uneven(owners: dict[int, int], scope: str, stream: str, count: int) -> bool:
    """Would numbering ``count`` first segments 0, 1, 2, ... leave a node leading fewer
    than ``count // 3``?"""
    per = Counter(owners[container_of(f"{scope}/{stream}/{n}", CONTAINERS)] for n in range(count))
    return min(per.get(n, 0) for n in NODES) < count // 3


def _pick(owners: dict[int, int], scope: str, prefix: str, count: int) -> str:
    return next(
        name for name in (f"{prefix}-{i}" for i in range(1000))
        if _hash_alone_is_uneven(owners, scope, name, count)
    )


def _led_evenly(bootstrap: str, topic: str, count: int) -> tuple[bool, Counter[int]]:
    found = leaders(bootstrap, topic)
    per = Counter(found.values())
    return len(found) == count and all(per[n] >= count // 3 for n in NODES), per


def _wait_even(bootstrap: str, topic: str, count: int) -> None:
    # Polled: Metadata names a partition's leader only once its segment's owner serves it.
    deadline = time.monotonic() + 60
    even, per = _led_evenly(bootstrap, topic, count)
    while not even and time.monotonic() < deadline:
        time.sleep(0.3)
        even, per = _led_evenly(bootstrap, topic, count)
    assert even, f"{topic}: partitions led per node {dict(per)}, each needs {count // 3}"


def test_a_new_topics_partitions_are_led_by_every_node(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS,
                        extra_args=("--set", "num.partitions=6"))
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, leader_id = _zk_state(zookeeper.hosts)
        assert sorted(Counter(owners.values()).values()) == [2, 2, 2], owners
        topics = {_pick(owners, "kafka", f"even{count}", count): count for count in COUNTS}
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        futures = admin.create_topics([NewTopic(t, c, 1) for t, c in topics.items()])
        for future in futures.values():
            future.result(30)
        for topic, count in topics.items():
            _wait_even(bootstrap, topic, count)

        # Auto-created by a producer's Metadata request.
        auto = _pick(owners, "kafka", "auto", 6)
        producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
        deadline = time.monotonic() + 30
        while len(producer.list_topics(auto, timeout=10).topics[auto].partitions) < 6:
            assert time.monotonic() < deadline, f"{auto} not auto-created"
            time.sleep(0.3)
        _wait_even(bootstrap, auto, 6)

        # Through a follower's gRPC (forwarded to the leader's controller).
        follower = next(n for n in nodes if n.node_id != leader_id)
        stream = _pick(owners, "plain", "six", 6)
        with grpc.insecure_channel(follower.grpc) as channel:
            stub = pb2_grpc.ControllerServiceStub(channel)
            stub.CreateScope(pb2.ScopeRequest(scope="plain"), timeout=30)
            stub.CreateStream(pb2.CreateStreamRequest(
                scope="plain", stream=stream,
                config=pb2.StreamConfig(scaling=pb2.ScalingPolicy(min_segments=6)),
            ), timeout=30)
            current = stub.GetCurrentSegments(
                pb2.StreamRequest(scope="plain", stream=stream), timeout=30
            ).segments
        per = Counter(
            owners[container_of(qualified_segment_name("plain", stream, s.id), CONTAINERS)]
            for s in current
        )
        assert len(current) == 6 and all(per[n] == 2 for n in NODES), per

        # CreatePartitions: the new segments come from a scale, spread the same way.
        grown = _pick(owners, "kafka", "grown", 3)
        admin.create_topics([NewTopic(grown, 3, 1)])[grown].result(30)
        _wait_even(bootstrap, grown, 3)
        admin.create_partitions([NewPartitions(grown, 6)])[grown].result(30)
        _wait_even(bootstrap, grown, 6)
    finally:
        for node in nodes:
            node.close()
