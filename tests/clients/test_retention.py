"""Retention seen from Kafka (issue 30): ``retention.ms`` and ``retention.bytes`` apply
together, as in Kafka, whichever limit is reached first; the log start that ListOffsets
reports has moved by the time the truncation is counted in ``/metrics``, not a polling
period later; consumers read on from the new log start."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.clients.autoscale_load import create_topic, metrics, produce, start_server, wait_until
from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    s = start_server(tmp_path)
    try:
        yield s
    finally:
        s.close()


def truncations(server: Tidegate, topic: str) -> float:
    return metrics(server).get(
        ("tidegate_truncations_total", (("reason", "retention"), ("topic", topic))), 0.0
    )


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-wm"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), 10) for p in range(partitions)]
    finally:
        c.close()


def first_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-read",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 30
    try:
        while len(first) < partitions:
            assert time.monotonic() < deadline, first
            for msg in c.consume(100, 0.5):
                assert msg.error() is None, msg.error()
                first.setdefault(msg.partition(), msg.offset())
    finally:
        c.close()
    return first


def test_size_bound_with_a_time_policy(server: Tidegate) -> None:
    """retention.ms of an hour and retention.bytes of 50 KB per partition: the size
    limit truncates, keeping at least 50 KB of each partition."""
    create_topic(server.bootstrap, "sized", 2,
                 {"retention.ms": "3600000", "retention.bytes": str(50 * 1000)})
    sent = produce(server.bootstrap, "sized", {0: 100, 1: 100}, seconds=4)
    wait_until(lambda: truncations(server, "sized") >= 1, 30, "a retention truncation")
    marks = watermarks(server.bootstrap, "sized", 2)
    for p, (low, high) in enumerate(marks):
        assert high == sent[p]
        assert low > 0, marks  # moved with the truncation, not a polling period later
        assert high - low >= 50 * 1000 // 1000 - 1, marks  # >= 50 KB kept (1 KB records)
    assert "truncation moved the log start of sized" in server.tail(400)
    first = first_offsets(server.bootstrap, "sized", 2)
    for p, (low, _) in enumerate(marks):
        assert first[p] >= low


def test_time_limit_with_a_size_bound(server: Tidegate) -> None:
    """retention.ms of 2 s and retention.bytes of 100 MB: time truncates."""
    create_topic(server.bootstrap, "timed", 1,
                 {"retention.ms": "2000", "retention.bytes": str(100 << 20)})
    sent = produce(server.bootstrap, "timed", {0: 50}, seconds=2)
    wait_until(lambda: truncations(server, "timed") >= 1, 30, "a retention truncation")
    [(low, high)] = watermarks(server.bootstrap, "timed", 1)
    assert high == sent[0] and low > 0
