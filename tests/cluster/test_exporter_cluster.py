"""kafka_exporter's series on a three-node cluster (issues 28 and 34), scraped from every
node as a Prometheus does: each series comes from one node only (the cluster's from the
controller leader, a partition's from its leader, a group's from its coordinator), so
sums over the scrapes count everything once; a group's lag covers all its partitions,
wherever they are led, and a partition a live member is assigned but never committed is
-1, as kafka_exporter gives it."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

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


def _overview(node: Node) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.rest_port}/ui/overview.json",
                                timeout=30) as answer:
        page: dict[str, Any] = json.load(answer)["kafka"]
    return page


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
        # A live member of another group that reads and commits nothing.
        idle = Consumer({"bootstrap.servers": everyone, "group.id": "idle",
                         "enable.auto.commit": False, **QUIET})
        idle.subscribe(["spread"])
        deadline = time.monotonic() + 60
        while len(idle.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, idle.assignment()
            idle.poll(0.2)

        scrapes = [metrics(n) for n in nodes]
        pages = [_overview(n) for n in nodes]
        idle.close()

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
        assert over_nodes("kafka_brokers") == [3]
        assert len([k for s in scrapes for k in s if k[0] == "kafka_broker_info"]) == 3
        assert over_nodes("kafka_topic_partitions", topic="spread") == [PARTITIONS]
        g = {"consumergroup": "summed", "topic": "spread"}
        assert over_nodes("kafka_consumergroup_current_offset_sum", **g) == [
            sum(committed.values())
        ]
        for p in range(PARTITIONS):
            tp = {**g, "partition": str(p)}
            assert over_nodes("kafka_consumergroup_current_offset", **tp) == [committed[p]]
            assert over_nodes("kafka_consumergroup_lag", **tp) == [sent[p] - committed[p]], p
        assert over_nodes("kafka_consumergroup_lag_sum", **g) == [
            sum(sent.values()) - sum(committed.values())
        ]
        for p in range(PARTITIONS):
            tp = {"consumergroup": "idle", "topic": "spread", "partition": str(p)}
            assert over_nodes("kafka_consumergroup_current_offset", **tp) == [-1]
            assert over_nodes("kafka_consumergroup_lag", **tp) == [-1]
        appended = over_nodes("kafka_server_brokertopicmetrics_messagesin_total", topic="spread")
        assert sum(appended) == sum(sent.values())
        # /ui: each node's page holds the partitions it leads and the groups it coordinates,
        # so the pages together show every partition and every group once.
        shown = sorted((p["partition"], page["node_id"]) for page in pages
                       for t in page["topics"] if t["name"] == "spread" for p in t["partitions"])
        assert shown == sorted(led.items())
        for page in pages:
            assert [t["partition_count"] for t in page["topics"] if t["name"] == "spread"] == [6]
        groups = {g["group"]: g for page in pages for g in page["groups"]}
        assert sum(len(page["groups"]) for page in pages) == len(groups) == 2, pages
        assert [(o["partition"], o["offset"], o["lag"]) for o in groups["idle"]["offsets"]] == [
            (p, -1, -1) for p in range(PARTITIONS)]
        assert groups["summed"]["lag"] == sum(sent.values()) - sum(committed.values())
    finally:
        for node in nodes:
            node.close()
