"""The Java client (kafka-clients' idempotent KafkaProducer, defaults acks=all) keeps
sending while a node of three is ``kill -9``ed; every acknowledged record is stored once,
at the offsets it was acknowledged with, dense per partition."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.clients import QUIET, leaders, read_back
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer
from tests.java.conftest import Java

PARTITIONS = 6
COUNT = 150_000


def _stored(consumer: Consumer, topic: str) -> int:
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            for p in range(PARTITIONS)
        )
    except KafkaException:  # the topic not known to this client yet
        return 0


def test_java_producer_carries_on_over_a_kill9(
    tmp_path: Path, zookeeper: ZooKeeperServer, java: Java
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("java", PARTITIONS, 1)])["java"].result(30)
        lead: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(lead) < PARTITIONS and time.monotonic() < deadline:
            lead = leaders(bootstrap, "java")
            time.sleep(0.2)
        victim = next(n for n in nodes if n.node_id in lead.values() and n.node_id != 1)
        # paced to at most 50 sends a millisecond, so the kill lands while it is sending
        proc = java.popen("ProducerScenario", bootstrap, "java", str(COUNT), str(PARTITIONS), "0", "50")
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", **QUIET})
        try:
            deadline = time.monotonic() + 60
            while _stored(probe, "java") < COUNT // 10 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()[0][-3000:]
                time.sleep(0.05)
            victim.kill9()
            out, _ = proc.communicate(timeout=200)
        finally:
            probe.close()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, out[-3000:]
        assert f"OK produce {COUNT}" in out
        acked = {
            (int(p), int(o)) for kind, p, o, _ in
            (line.split() for line in out.splitlines() if line.startswith("P ")) if kind == "P"
        }
        assert len(acked) == COUNT
        survivors = ",".join(n.bootstrap for n in nodes if n is not victim)
        stored = read_back(survivors, "java", PARTITIONS, timeout_s=120)
        assert {(p, o) for p, o, _ in stored} == acked
        assert len(stored) == COUNT
        assert len({v for _, _, v in stored}) == COUNT
    finally:
        for node in nodes:
            node.close()
