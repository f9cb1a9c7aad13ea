"""The at-least-once Kafka sink of ``format("tidegate")`` through its writer, as Spark's
tasks call it (without Spark), against a real ``tidegate serve`` (issue 34): an empty task
opens no producer, and the tasks of later micro-batches in the same Python worker reuse
the producer of the first, as Spark's Kafka sink caches its producers. The server's
InitProducerId count (``/metrics``) shows how many producers were opened."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql.types import Row, StringType, StructField, StructType
from tidegate.spark import sink
from tidegate.spark.options import write_options
from tidegate.spark.sink import KafkaStreamWriter

from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(180)

SCHEMA = StructType([StructField("value", StringType())])
TOPIC = "sink-alo"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    sink._PRODUCERS.clear()  # a fresh Python worker
    s = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", rest=True)
    s.start()
    yield s
    sink._PRODUCERS.clear()  # no producer left retrying a stopped server
    s.close()


def _init_producer_ids(server: Tidegate) -> int:
    text = httpx.get(f"http://127.0.0.1:{server.rest_port}/metrics", timeout=10).text
    found = re.search(r'^tidegate_request_seconds_count\{api="InitProducerId"\} (\S+)$', text, re.M)
    return 0 if found is None else int(float(found.group(1)))


def _values(bootstrap: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        parts = c.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
        c.assign([TopicPartition(TOPIC, p, 0) for p in parts])
        got: list[str] = []
        ended: set[int] = set()
        while len(ended) < len(parts):
            msg = c.poll(30)
            assert msg is not None, "no end of partition in 30 s"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                ended.add(msg.partition())
            else:
                got.append(msg.value().decode())
        return sorted(got)
    finally:
        c.close()


def test_empty_tasks_open_nothing_and_batches_share_a_producer(server: Tidegate) -> None:
    writer = KafkaStreamWriter(write_options({"kafka.bootstrap.servers": server.bootstrap, "topic": TOPIC}),
                               SCHEMA)
    for _ in range(3):  # a micro-batch of empty tasks
        assert writer.write(iter([])).rows == 0
    writer.commit([], 0)
    assert _init_producer_ids(server) == 0
    for batch in (1, 2):
        messages = [writer.write(iter([Row(value=f"{batch}-{task}-{i}") for i in range(2)]))
                    for task in range(2)]
        assert [m.rows for m in messages] == [2, 2]
        writer.commit(messages, batch)
    assert _init_producer_ids(server) == 1
    assert _values(server.bootstrap) == sorted(f"{b}-{t}-{i}" for b in (1, 2) for t in range(2) for i in range(2))
