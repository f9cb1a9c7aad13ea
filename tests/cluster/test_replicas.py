"""Kafka replicas in cluster mode (issue 36, item 8): a topic created with replication
factor 3 on the replicated Tier-1 reports as each partition's replicas the nodes whose
plog servers hold its container's log (as ZooKeeper records it), leader first, all in
sync, as librdkafka
(``kcat -L``), the Java AdminClient (describeTopics) and the kafka_exporter series see
it; once a node is ``kill -9``ed no partition names it in sync any more."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import grpc
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from tidegate.core.controller.api import qualified_segment_name
from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.log.topics import partition_point
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.clients.autoscale_load import metrics
from tests.cluster.clients import QUIET
from tests.cluster.nodes import Node, start_together
from tests.cluster.test_leader_scale import CONTAINERS
from tests.cluster.zk import ZooKeeperServer
from tests.conftest import free_port
from tests.java.conftest import Java

PARTITIONS = 6
TOPIC = "redundant"


def _kcat(bootstrap: str) -> list[dict[str, Any]]:
    """``kcat -L`` (JSON) of the topic's partitions."""
    out = subprocess.run(
        ["kcat", "-L", "-J", "-b", bootstrap, "-t", TOPIC, "-m", "10"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    [topic] = [t for t in json.loads(out)["topics"] if t["topic"] == TOPIC]
    return list(topic["partitions"])


def _ids(items: list[dict[str, Any]]) -> list[int]:
    return [int(i["id"]) for i in items]


def _plog_nodes(hosts: str) -> dict[int, set[int]]:
    """Each container's plog nodes as ZooKeeper records them: the servers of its log's
    last plog, mapped to nodes by the ids the nodes announce (``plog``)."""
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        node_of = {
            json.loads(zk.get(f"/nodes/{n}")[0])["plog"]: int(n) for n in zk.get_children("/nodes")
        }
        out = {}
        for cid in range(CONTAINERS):
            meta = json.loads(zk.get(f"/tidegate/plog/logs/tidegate-container-{cid}")[0])
            out[cid] = {node_of[sid] for sid in meta["plogs"][-1]["servers"]}
        return out
    finally:
        zk.stop()
        zk.close()


def _segments(node: Node) -> dict[int, int]:
    """Each partition's current segment (numbered by the controller's placement, not by
    the partition), from the topic's key ranges."""
    with grpc.insecure_channel(node.grpc) as channel:
        current = pb2_grpc.ControllerServiceStub(channel).GetCurrentSegments(
            pb2.StreamRequest(scope="kafka", stream=TOPIC), timeout=30
        ).segments
    return {
        p: next(s.id for s in current if s.key_start <= partition_point(p) < s.key_end)
        for p in range(PARTITIONS)
    }


def _java_replicas(java: Java, bootstrap: str) -> dict[int, tuple[int, list[int], list[int]]]:
    out = java.run("AdminScenarios", bootstrap, "replicas", TOPIC)
    found = {}
    for line in out.splitlines():
        if line.startswith("partition "):
            _, p, leader, replicas, isr = line.split()
            found[int(p)] = (
                int(leader.split("=")[1]),
                [int(n) for n in replicas.split("=")[1].split(",") if n],
                [int(n) for n in isr.split("=")[1].split(",") if n],
            )
    return found


def test_replicas_and_isr_are_the_plog_nodes(
    tmp_path: Path, zookeeper: ZooKeeperServer, java: Java
) -> None:
    nodes = [Node(tmp_path, i + 1, zookeeper.hosts, CONTAINERS) for i in range(3)]
    for node in nodes:
        node.rest_port = free_port()
        node.extra_args += ["--rest", f"127.0.0.1:{node.rest_port}"]
    start_together(nodes)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **QUIET})
        for p in range(PARTITIONS):
            producer.produce(TOPIC, b"x", partition=p)
        assert producer.flush(60) == 0
        del producer

        segments = _segments(nodes[0])
        deadline = time.monotonic() + 30
        while True:  # the replicas are read from ZooKeeper at most once a second
            parts = _kcat(bootstrap)
            # A container started while the cluster formed may write on two servers (the
            # Tier-1's minimum) until its log is re-replicated or moves on to its next
            # plog: what ZooKeeper records is what is reported, a second later at most.
            plogs = _plog_nodes(zookeeper.hosts)
            expected = {
                p: plogs[container_of(qualified_segment_name("kafka", TOPIC, segments[p]), CONTAINERS)]
                for p in range(PARTITIONS)
            }
            settled = all(set(_ids(p["replicas"])) == expected[p["partition"]] | {p["leader"]}
                          for p in parts)
            if (all(len(_ids(p["isrs"])) >= 2 for p in parts) and settled) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert len(parts) == PARTITIONS
        assert all(len(v) >= 2 for v in expected.values()), expected
        for p in parts:
            replicas, isr = _ids(p["replicas"]), _ids(p["isrs"])
            assert replicas[0] == p["leader"], f"the leader is not first: {p}"
            assert set(replicas) == expected[p["partition"]] | {p["leader"]}, (p, expected)
            assert isr == replicas, p

        described = _java_replicas(java, bootstrap)
        assert sorted(described) == list(range(PARTITIONS)), described
        for p, (leader, replicas, isr) in described.items():
            assert replicas[0] == leader, described
            assert set(replicas) == expected[p] | {leader} and isr == replicas, described

        series = {}
        for node in nodes:
            for (name, labels), value in metrics(node).items():
                if name.startswith("kafka_topic_partition_") and ("topic", TOPIC) in labels:
                    series.setdefault(name, {})[labels] = value
        sizes = {p: len(expected[p] | {described[p][0]}) for p in range(PARTITIONS)}
        for name in ("kafka_topic_partition_replicas", "kafka_topic_partition_in_sync_replica"):
            assert len(series[name]) == PARTITIONS, series[name]  # each partition on its leader
            got = {int(dict(labels)["partition"]): v for labels, v in series[name].items()}
            assert got == sizes, (name, got, sizes)
        assert set(series["kafka_topic_partition_under_replicated_partition"].values()) == {0}

        dead = nodes[2]
        dead.kill9()
        alive = ",".join(n.bootstrap for n in nodes[:2])
        deadline = time.monotonic() + 60
        while True:
            parts = _kcat(alive)
            settled = all(
                p["leader"] in (1, 2) and dead.node_id not in _ids(p["isrs"])
                and _ids(p["isrs"])[0] == p["leader"]
                for p in parts
            )
            if settled:
                break
            assert time.monotonic() < deadline, f"the dead node is still in sync: {parts}"
            time.sleep(0.5)
    finally:
        for node in nodes:
            node.close()
