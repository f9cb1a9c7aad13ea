"""A node stopped with SIGTERM exits cleanly and its containers move to the others,
which serve its partitions from where it left them."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.clients import QUIET, leaders, read_back
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 4


def _produce(bootstrap: str, values: range) -> list[tuple[int, int, bytes]]:
    acked: list[tuple[int, int, bytes]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", **QUIET})
    for i in values:
        producer.produce(
            "leaving", value=str(i).encode(), partition=i % PARTITIONS,
            on_delivery=lambda err, msg: acked.append((msg.partition(), msg.offset(), msg.value()))
            if err is None else None,
        )
    assert producer.flush(60) == 0
    return acked


def test_sigterm_hands_containers_over(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 2, container_count=4, tier1="file")
    try:
        first, second = nodes
        bootstrap = f"{first.bootstrap},{second.bootstrap}"
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("leaving", PARTITIONS, 1)])["leaving"].result(30)
        deadline = time.monotonic() + 30
        while len(set(leaders(bootstrap, "leaving").values())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert set(leaders(bootstrap, "leaving").values()) == {1, 2}
        acked = _produce(bootstrap, range(0, 400))
        assert second.stop() == 0, second.tail()
        deadline = time.monotonic() + 30
        while set(leaders(first.bootstrap, "leaving").values()) != {1} and time.monotonic() < deadline:
            time.sleep(0.2)
        assert set(leaders(first.bootstrap, "leaving").values()) == {1}
        acked += _produce(first.bootstrap, range(400, 800))
        stored = read_back(first.bootstrap, "leaving", PARTITIONS)
        assert sorted(stored) == sorted(acked)
        for p in range(PARTITIONS):
            assert [o for q, o, _ in sorted(stored) if q == p] == list(range(200))
    finally:
        for node in nodes:
            node.close()
