"""kafka_exporter's series on ``/metrics`` (issue 28), against a real ``tidegate serve``:
the values a test computes from what it produced and committed, with kafka_exporter's
names and labels; per-topic bytes and records in and out; the process and GC series."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.clients.autoscale_load import create_topic, metrics
from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(120)

TOPIC = "exported"
PARTITIONS = 3
#: Records produced to each partition.
SENT = {0: 30, 1: 12, 2: 5}
#: Offsets the group commits per partition.
COMMITTED = {0: 10, 1: 12}
VALUE = b"v" * 100




def _produce(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in SENT.items():
        for i in range(n):
            p.produce(TOPIC, VALUE, key=str(i).encode(), partition=partition)
    assert p.flush(30) == 0


def _consume_and_commit(bootstrap: str, group: str) -> tuple[Consumer, int]:
    """A member that reads everything and commits ``COMMITTED``; returns it (still a
    member) and the records it received."""
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    c.subscribe([TOPIC])
    received = 0
    for _ in range(60):
        received += len(c.consume(100, 0.5))
        if received >= sum(SENT.values()):
            break
    assert received == sum(SENT.values())
    c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
             asynchronous=False)
    return c, received


def test_kafka_exporter_series(rest_server: Tidegate) -> None:
    server = rest_server
    create_topic(server.bootstrap, TOPIC, PARTITIONS, {})
    _produce(server.bootstrap)
    member, received = _consume_and_commit(server.bootstrap, "dashboards")
    try:
        m = metrics(server)
    finally:
        member.close()

    def value(name: str, **labels: str) -> float:
        return m[(name, tuple(sorted(labels.items())))]

    assert value("kafka_brokers") == 1
    assert value("kafka_broker_info", address=server.bootstrap, id="0") == 1
    assert value("kafka_topic_partitions", topic=TOPIC) == PARTITIONS
    for p, n in SENT.items():
        tp = {"topic": TOPIC, "partition": str(p)}
        assert value("kafka_topic_partition_current_offset", **tp) == n
        assert value("kafka_topic_partition_oldest_offset", **tp) == 0
        assert value("kafka_topic_partition_leader", **tp) == 0
        assert value("kafka_topic_partition_in_sync_replica", **tp) == 1
        assert value("kafka_topic_partition_under_replicated_partition", **tp) == 0
    g = {"consumergroup": "dashboards"}
    for p, o in COMMITTED.items():
        tp = {**g, "topic": TOPIC, "partition": str(p)}
        assert value("kafka_consumergroup_current_offset", **tp) == o
        assert value("kafka_consumergroup_lag", **tp) == SENT[p] - o
    # A partition the member is assigned and the group never committed: -1 and -1, as
    # kafka_exporter gives them (alertable), and left out of the sums.
    uncommitted = {**g, "topic": TOPIC, "partition": "2"}
    assert value("kafka_consumergroup_current_offset", **uncommitted) == -1
    assert value("kafka_consumergroup_lag", **uncommitted) == -1
    assert value("kafka_consumergroup_lag_sum", **g, topic=TOPIC) == sum(
        SENT[p] - o for p, o in COMMITTED.items()
    )
    assert value("kafka_consumergroup_current_offset_sum", **g, topic=TOPIC) == sum(
        COMMITTED.values()
    )
    assert value("kafka_consumergroup_members", **g) == 1
    # Per topic in and out: every record went in once and out at least once.
    records_in = value("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC)
    assert records_in == sum(SENT.values())
    assert value("kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) > (
        records_in * len(VALUE)
    )
    assert value("tidegate_topic_records_out_total", topic=TOPIC) >= received
    assert value("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) > (
        received * len(VALUE)
    )
    # The process and GC collectors are served too.
    assert value("process_resident_memory_bytes") > 0
    assert ("python_gc_collections_total", (("generation", "0"),)) in m


def test_uncommitted_partitions_of_a_consumer_protocol_group(rest_server: Tidegate) -> None:
    """A KIP-848 member (``group.protocol=consumer``) assigned every partition, with no
    commit yet: each partition is -1 and -1, as kafka_exporter reports it."""
    server = rest_server
    create_topic(server.bootstrap, TOPIC, PARTITIONS, {})
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "fresh",
                  "group.protocol": "consumer", "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        for _ in range(120):
            c.poll(0.25)
            if len(c.assignment()) == PARTITIONS:
                break
        assert len(c.assignment()) == PARTITIONS, c.assignment()
        m = metrics(server)
    finally:
        c.close()
    for p in range(PARTITIONS):
        tp = (("consumergroup", "fresh"), ("partition", str(p)), ("topic", TOPIC))
        assert m[("kafka_consumergroup_current_offset", tp)] == -1
        assert m[("kafka_consumergroup_lag", tp)] == -1
    sums = (("consumergroup", "fresh"), ("topic", TOPIC))
    assert m[("kafka_consumergroup_lag_sum", sums)] == 0  # the -1s are left out
    assert m[("kafka_consumergroup_members", (("consumergroup", "fresh"),))] == 1
