"""Consumer-group lag leaves out control records (transaction markers): a read_committed
group that read everything a transactional producer committed has lag 0 in
``kafka_consumergroup_lag`` and in ``/ui``'s overview, though the marker sits past its
committed offset; records of a later transaction count."""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.clients.autoscale_load import create_topic, metrics
from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(120)

TOPIC = "txn-lag"


def _transaction(bootstrap: str, records: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "lag-writer"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(records):
        p.produce(TOPIC, f"v{i}".encode(), partition=0)
    p.commit_transaction(30)


def _read_all_and_commit(bootstrap: str, group: str, records: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < records and time.monotonic() < deadline:
            got += [m for m in c.consume(100, 0.5) if m.error() is None]
        assert len(got) == records
        # The offset after the last record processed, as kafka-python, Kafka Streams and
        # TxnOffsetCommit users commit it (librdkafka would commit past the marker).
        (committed,) = c.commit(offsets=[TopicPartition(TOPIC, 0, got[-1].offset() + 1)], asynchronous=False)
        return int(committed.offset)
    finally:
        c.close()


def _lag(server: Tidegate, group: str) -> tuple[float, int]:
    key = ("kafka_consumergroup_lag", tuple(sorted({"consumergroup": group, "topic": TOPIC, "partition": "0"}.items())))
    overview = httpx.get(f"http://127.0.0.1:{server.rest_port}/ui/overview.json", timeout=10).json()["kafka"]
    (g,) = [g for g in overview["groups"] if g["group"] == group]
    return metrics(server)[key], g["lag"]


def test_control_records_are_not_lag(rest_server: Tidegate) -> None:
    b = rest_server.bootstrap
    create_topic(b, TOPIC, 1, {})
    _transaction(b, 5)
    # The consumer's position is past the data, before the commit marker at offset 5.
    assert _read_all_and_commit(b, "caught-up", 5) == 5
    assert _lag(rest_server, "caught-up") == (0, 0)
    # A later transaction's records are lag; its marker is not.
    _transaction(b, 3)
    assert _lag(rest_server, "caught-up") == (3, 3)
