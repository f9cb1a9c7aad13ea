"""Exactly-once consume-transform-produce with a KIP-848 consumer
(``group.protocol=consumer``): the transactional producer commits the consumer's offsets
with its group metadata (member id and member epoch), which TxnOffsetCommit checks as
Kafka's ``ConsumerGroup.validateOffsetCommit`` does."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.clients.server import Tidegate
from tests.txn.helpers import create_topic, read_all

COUNT = 60


def test_a_consumer_group_member_commits_its_offsets_in_a_transaction(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "src", 2)
    create_topic(tidegate.bootstrap, "dst", 2)
    plain = Producer({"bootstrap.servers": tidegate.bootstrap})
    for i in range(COUNT):
        plain.produce("src", f"v-{i}".encode(), partition=i % 2)
    assert plain.flush(30) == 0
    consumer = Consumer({
        "bootstrap.servers": tidegate.bootstrap, "group.id": "eos-848", "group.protocol": "consumer",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })
    producer = Producer({"bootstrap.servers": tidegate.bootstrap, "transactional.id": "eos-848", "linger.ms": 5})
    producer.init_transactions(30)
    consumer.subscribe(["src"])
    done = 0
    deadline = time.monotonic() + 60
    try:
        while done < COUNT and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(20, 0.5) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce("dst", b"out-" + m.value(), partition=m.partition())
            metadata = consumer.consumer_group_metadata()
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), metadata, 30)
            producer.commit_transaction(30)
            done += len(msgs)
        committed = consumer.committed([TopicPartition("src", p) for p in range(2)], 10)
    finally:
        consumer.close()
    assert done == COUNT
    assert sorted(tp.offset for tp in committed) == [COUNT // 2, COUNT // 2]
    out = read_all(tidegate.bootstrap, "dst", 2, committed=True, expect=COUNT)
    assert sorted(out) == sorted(f"out-v-{i}".encode() for i in range(COUNT))
