"""Admin requests work on any node of the cluster: topics created, grown and deleted
through followers (their controller writes go to the leader's gRPC API) are seen, led
and served by every node."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kazoo.client import KazooClient

from tests.cluster.clients import QUIET, leaders, node_leaders, read_back
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer


def _leader_id(hosts: str) -> int:
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        import json

        return int(json.loads(zk.get("/controller/leader")[0])["node"])
    finally:
        zk.stop()
        zk.close()


def test_topics_made_grown_and_deleted_through_followers(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    try:
        leader = _leader_id(zookeeper.hosts)
        followers = [n for n in nodes if n.node_id != leader]
        everyone = ",".join(n.bootstrap for n in nodes)
        # Only a follower as bootstrap: the admin client talks to the cluster through it
        # first, and the controller work must still happen on the leader.
        admin = AdminClient({"bootstrap.servers": followers[0].bootstrap, **QUIET})
        admin.create_topics([NewTopic("grown", 2, 1)])["grown"].result(30)
        admin.create_partitions([NewPartitions("grown", 4)])["grown"].result(30)
        for node in nodes:  # every node comes to know the topic with its four partitions
            # Asked of this node alone: librdkafka sends Metadata to any broker it knows,
            # and a node follows another's change within its topics refresh (0.5 s).
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(node_leaders(node.port, "grown")) < 4:
                time.sleep(0.2)
            assert len(node_leaders(node.port, "grown")) == 4, f"node {node.node_id}"
        acked = []
        for p in range(4):
            acked += _produce_to(everyone, "grown", p)
        stored = read_back(everyone, "grown", 4)
        assert sorted(stored) == sorted(acked)

        other = AdminClient({"bootstrap.servers": followers[1].bootstrap, **QUIET})
        other.delete_topics(["grown"])["grown"].result(30)
        # Every node forgets it (each query may be answered by any of them).
        absent = 0
        deadline = time.monotonic() + 30
        while absent < 6 and time.monotonic() < deadline:
            listed = AdminClient({"bootstrap.servers": everyone, **QUIET}).list_topics(timeout=10)
            absent = absent + 1 if "grown" not in listed.topics else 0
            time.sleep(0.1)
        assert absent >= 6, "a node still lists the deleted topic"
        # A new topic of the same name starts again at offset 0 on whichever node leads it.
        admin.create_topics([NewTopic("grown", 4, 1)])["grown"].result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(leaders(everyone, "grown")) < 4:
            time.sleep(0.2)
        again = _produce_to(everyone, "grown", 3)
        assert [o for _, o, _ in again] == list(range(50))
        assert sorted(read_back(everyone, "grown", 4)) == sorted(again)
        leader_log = next(n for n in nodes if n.node_id == leader).tail(400)
        assert "Traceback" not in leader_log
    finally:
        for node in nodes:
            node.close()


def _produce_to(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int, bytes]]:
    from confluent_kafka import Producer

    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "message.timeout.ms": 30_000, **QUIET,
    })
    for i in range(50):
        producer.produce(
            topic, value=f"{partition}-{i}".encode(), partition=partition,
            on_delivery=lambda err, msg: acked.append((msg.partition(), msg.offset(), msg.value()))
            if err is None else errors.append(str(err)),
        )
    producer.flush(60)
    assert not errors, errors[:3]
    return acked
