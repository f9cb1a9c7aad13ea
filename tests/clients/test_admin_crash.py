"""Admin operations survive ``kill -9`` (issue 22, finding 6): DeleteTopics and
CreatePartitions are killed at random points; after a restart each topic is as it was
before the operation or as it is after it, never a zombie (listed but refusing
produce) and never a half-split topic."""

from __future__ import annotations

import random
import socket
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.admin import CreatePartitionsRequest, DeleteTopicsRequest

from tests.clients import requests as kreq
from tests.clients.server import Tidegate


def _send(port: int, frame: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(frame)
    return sock


def _partitions(admin: AdminClient, topic: str) -> int | None:
    meta = admin.list_topics(timeout=20).topics.get(topic)
    return None if meta is None else len(meta.partitions)


def _produce_everywhere(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20_000})
    failed: list[object] = []
    for p in range(partitions):
        producer.produce(topic, b"v", partition=p,
                         on_delivery=lambda e, _m: e is not None and failed.append(e))
    assert producer.flush(40) == 0 and not failed, failed[:3]


def _create(admin: AdminClient, topic: str, partitions: int) -> None:
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        f.result(timeout=60)


def test_delete_topics_killed_anywhere(tidegate: Tidegate) -> None:
    rng = random.Random(22)
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    for round_ in range(3):
        topic = f"doomed-{round_}"
        _create(admin, topic, 300)
        frame = kreq.frame(DeleteTopicsRequest(topic_names=[topic], timeout_ms=60_000), 4)
        sock = _send(tidegate.port, frame)
        time.sleep(rng.uniform(0.0, 0.4))
        tidegate.kill9()
        sock.close()
        tidegate.start()
        admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
        count = _partitions(admin, topic)
        if count is not None:  # before: whole, and it takes records
            assert count == 300
            _produce_everywhere(tidegate.bootstrap, topic, 300)
        else:  # after: gone, and the name can be used again
            _create(admin, topic, 2)
            _produce_everywhere(tidegate.bootstrap, topic, 2)


def test_create_partitions_killed_anywhere(tidegate: Tidegate) -> None:
    rng = random.Random(6)
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    for round_ in range(3):
        topic = f"growing-{round_}"
        _create(admin, topic, 40)
        request = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=topic, count=400, assignments=None)], timeout_ms=60_000, validate_only=False)
        sock = _send(tidegate.port, kreq.frame(request, 1))
        time.sleep(rng.uniform(0.0, 0.3))
        tidegate.kill9()
        sock.close()
        tidegate.start()
        admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
        count = _partitions(admin, topic)
        assert count in (40, 400), count
        _produce_everywhere(tidegate.bootstrap, topic, count)
        if count == 40:  # before: the operation can be made again
            for f in admin.create_partitions([NewPartitions(topic, 400)]).values():
                f.result(timeout=60)
            _produce_everywhere(tidegate.bootstrap, topic, 400)
    assert "Traceback" not in tidegate.tail(400)
