"""Small helpers for the transaction tests: topics, read_committed/uncommitted reads."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(30)


def read_all(
    bootstrap: str, topic: str, partitions: int, *, committed: bool, expect: int | None = None,
    timeout_s: float = 60.0,
) -> list[bytes]:
    """Every value in ``topic`` as a consumer with that isolation level sees it, until
    the end offsets are reached (or ``expect`` values, for read_committed)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if committed else "read_uncommitted",
    })
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            at_end = all(tp.offset >= ends[tp.partition] for tp in positions)
            if (expect is not None and len(out) >= expect) or (expect is None and at_end and msg is None):
                break
        return out
    finally:
        consumer.close()
