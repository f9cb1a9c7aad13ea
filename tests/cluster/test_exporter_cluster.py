"""kafka_exporter's series on a three-node cluster (issue 28): each node reports the
partitions it leads and the groups it coordinates, so the sums over the nodes' scrapes
count each partition and each group once, and agree with what the test produced and
committed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.autoscale_load import metrics
from tests.cluster.clients import QUIET, leaders
from tests.cluster.nodes import Node, start_together
from tests.cluster.zk import ZooKeeperServer
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6


def test_series_summed_over_nodes(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    nodes = [Node(tmp_path, i + 1, zookeeper.hosts, 6) for i in range(3)]
    for node in nodes:
        node.rest_port = free_port()
        node.extra_args = ["--rest", f"127.0.0.1:{node.rest_port}"]
    start_together(nodes)
    try:
        everyone = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": everyone, **QUIET})
        admin.create_topics([NewTopic("spread", PARTITIONS, 1)])["spread"].result(30)
        deadline = time.monotonic() + 30
        while len(leaders(everyone, "spread")) < PARTITIONS:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        sent = {p: 5 * (p + 1) for p in range(PARTITIONS)}
        producer = Producer({"bootstrap.servers": everyone, "acks": "all", **QUIET})
        for p, n in sent.items():
            for i in range(n):
                producer.produce("spread", str(i).encode(), partition=p)
        assert producer.flush(60) == 0
        committed = {p: 2 for p in range(PARTITIONS)}
        c = Consumer({"bootstrap.servers": everyone, "group.id": "summed", **QUIET})
        c.commit(offsets=[TopicPartition("spread", p, o) for p, o in committed.items()],
                 asynchronous=False)
        c.close()

        scrapes = [metrics(n) for n in nodes]

        def over_nodes(name: str, **labels: str) -> list[float]:
            key = (name, tuple(sorted(labels.items())))
            return [s[key] for s in scrapes if key in s]

        for p, n in sent.items():
            tp = {"topic": "spread", "partition": str(p)}
            assert over_nodes("kafka_topic_partition_current_offset", **tp) == [n]
        led = leaders(everyone, "spread")
        for p in range(PARTITIONS):
            tp = {"topic": "spread", "partition": str(p)}
            assert over_nodes("kafka_topic_partition_leader", **tp) == [led[p]]
        assert over_nodes("kafka_brokers") == [3, 3, 3]
        assert over_nodes("kafka_topic_partitions", topic="spread") == [PARTITIONS] * 3
        g = {"consumergroup": "summed", "topic": "spread"}
        assert over_nodes("kafka_consumergroup_current_offset_sum", **g) == [
            sum(committed.values())
        ]
        appended = over_nodes("kafka_server_brokertopicmetrics_messagesin_total", topic="spread")
        assert sum(appended) == sum(sent.values())
    finally:
        for node in nodes:
            node.close()
